// netkv-ns3: the egress class queues (the emulation's HTB tree).
#pragma once

namespace
{

void QueueCharge(uint32_t node, Ptr<const Packet> tcpSegment, bool in); // linux_tcp.h: TSQ

// ---------------------------------------------------------------------------------------
// The egress queue: the emulation's HTB tree on every sending interface, as a queue disc.
// Leaves: control, one per KV level (level 0 first, the scavenger last) and background.
// A class under its guaranteed rate (a token bucket of share x link rate) is served
// first, lowest priority value first; when none is, the lowest priority value borrows the
// link (HTB lends spare rate to the lowest prio first). KV levels share the KV class's
// guarantee and are strictly ordered, as HTB's 1% per level nearly is.

class ClassQueueDisc : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("netkv::ClassQueueDisc")
                                .SetParent<QueueDisc>()
                                .AddConstructor<ClassQueueDisc>();
        return tid;
    }

    ClassQueueDisc()
        : QueueDisc(QueueDiscSizePolicy::MULTIPLE_QUEUES)
    {
    }

    // leaves: 0 control, 1 .. levels + 1 the KV levels (the scavenger last), then background
    void Configure(double rateBps, uint32_t limit, uint32_t levels, bool host, uint32_t node)
    {
        m_rate = rateBps / 8.0;
        m_host = host;
        m_node = node;
        m_levels = levels;
        QueueSize size = g_set.byteLimit ? QueueSize(QueueSizeUnit::BYTES, limit * g_set.frameBytes)
                                         : QueueSize(QueueSizeUnit::PACKETS, limit);
        for (uint32_t i = 0; i < levels + 3; ++i)
        {
            auto q = CreateObject<DropTailQueue<QueueDiscItem>>();
            q->SetMaxSize(size);
            AddInternalQueue(q);
        }
        const double shares[3] = {0.05, 0.60, 0.35};
        for (int c = 0; c < 3; ++c)
        {
            m_fill[c] = m_rate * shares[c];
            m_burst[c] = std::max(2.0 * 1600, m_fill[c] * 1e-3);
            m_tokens[c] = m_burst[c];
        }
    }

    double Rate() const // the link's rate, bits/s (the device's may be faster: Charge)
    {
        return m_rate * 8;
    }

    // bytes and drops per class (0 control, 1 kv, 2 background) since the start
    std::array<uint64_t, 3> sent{};
    std::array<uint64_t, 3> dropped{};
    uint64_t packets = 0; // sent, every class
    uint64_t marked = 0;  // KV packets marked CE (DCTCP)

  private:
    static constexpr int kControl = 0, kKv = 1, kBackground = 2;

    // the leaf a packet joins, by the emulation's filters: SYNs to control, then DSCP
    uint32_t LeafOf(Ptr<QueueDiscItem> item) const
    {
        auto ip = DynamicCast<Ipv4QueueDiscItem>(item);
        if (!ip)
        {
            return 0;
        }
        const Ipv4Header& h = ip->GetHeader();
        uint8_t dscp = h.GetTos() >> 2;
        if (h.GetProtocol() == 6 && item->GetPacket()->GetSize() >= 14)
        {
            uint8_t tcp[14];
            item->GetPacket()->CopyData(tcp, 14);
            if (tcp[13] & 0x02) // SYN, SYN-ACK
            {
                return 0;
            }
        }
        if (dscp == 48)
        {
            return 0;
        }
        if (dscp == 34)
        {
            return 1;
        }
        if (m_levels > 0 && dscp >= 16 && dscp < 16 + m_levels)
        {
            return 1 + (dscp - 16);
        }
        if (m_levels > 0 && dscp == 8)
        {
            return 1 + m_levels;
        }
        return m_levels + 2;
    }

    int ClassOfLeaf(uint32_t leaf) const
    {
        return leaf == 0 ? kControl : leaf <= m_levels + 1 ? kKv : kBackground;
    }

    // ns-3's TCP sets ECT only on sockets without a TOS of their own, and every KV socket
    // has one (its DSCP): under DCTCP the sender's own queue sets ECT(0) on its KV data
    // segments instead, as Linux's DCTCP sets it on every data segment.
    static void MarkEct(Ptr<QueueDiscItem> item)
    {
        auto ip = DynamicCast<Ipv4QueueDiscItem>(item);
        uint8_t tcp[14];
        if (!ip || ip->GetHeader().GetProtocol() != 6 || item->GetPacket()->GetSize() < 14)
        {
            return;
        }
        item->GetPacket()->CopyData(tcp, 14);
        uint32_t payload = item->GetPacket()->GetSize() - 4u * (tcp[12] >> 4);
        if (payload > 0 && ip->GetHeader().GetEcn() == Ipv4Header::ECN_NotECT)
        {
            const_cast<Ipv4Header&>(ip->GetHeader()).SetEcn(Ipv4Header::ECN_ECT0);
        }
    }

    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        uint32_t leaf = LeafOf(item);
        int cls = ClassOfLeaf(leaf);
        if (m_host && cls == kKv && g_set.ecnK > 0)
        {
            MarkEct(item);
        }
        if (cls == kKv && g_set.ecnK > 0 && KvPackets() >= g_set.ecnK && Mark(item, "above K"))
        {
            marked++;
        }
        Ptr<const Packet> segment = m_host && IsTcp(item) ? item->GetPacket() : nullptr;
        if (!GetInternalQueue(leaf)->Enqueue(item)) // dropped: the queue disc counts it too
        {
            dropped[cls]++;
            return false;
        }
        if (segment)
        {
            QueueCharge(m_node, segment, true);
        }
        return true;
    }

    static bool IsTcp(Ptr<QueueDiscItem> item)
    {
        auto ip = DynamicCast<Ipv4QueueDiscItem>(item);
        return ip && ip->GetHeader().GetProtocol() == 6;
    }

    uint32_t KvPackets() const
    {
        uint32_t n = 0;
        for (uint32_t i = 1; i <= m_levels + 1; ++i)
        {
            n += GetInternalQueue(i)->GetNPackets();
        }
        return n;
    }

    // the first non-empty leaf of a class (KV levels in their strict order)
    int32_t Head(int cls) const
    {
        uint32_t from = cls == kControl ? 0 : cls == kKv ? 1 : m_levels + 2;
        uint32_t to = cls == kControl ? 0 : cls == kKv ? m_levels + 1 : m_levels + 2;
        for (uint32_t i = from; i <= to; ++i)
        {
            if (!GetInternalQueue(i)->IsEmpty())
            {
                return int32_t(i);
            }
        }
        return -1;
    }

    // What a packet costs the link's tokens. As HTB shapes it (twin "htb"): its frame on
    // the emulation's Ethernet, TCP with timestamps (ns-3's segment is 26 bytes shorter),
    // so both engines count the same bytes for the same payload; else its size here.
    static double Charge(Ptr<QueueDiscItem> item)
    {
        if (g_set.wire <= 1)
        {
            return item->GetSize();
        }
        return item->GetSize() + 14.0 + (IsTcp(item) ? 12.0 : 0.0);
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        double now = Simulator::Now().GetSeconds();
        double dt = now - m_last;
        m_last = now;
        for (int c = 0; c < 3; ++c)
        {
            m_tokens[c] = std::min(m_burst[c], m_tokens[c] + m_fill[c] * dt);
        }
        // HTB on a veth (twin "htb"): a packet leaves once the link's tokens are not in
        // debt, then crosses at the wire's speed, so it is paced by the rate without
        // waiting out its own serialisation; the bucket holds pyroute2's default burst
        // (an MTU of 1600 bytes), so an idle link lets one more frame through at once.
        if (g_set.wire > 1)
        {
            m_link = std::min(kHtbBurst, m_link + m_rate * dt);
            if (m_link < 0)
            {
                if (GetNPackets() > 0 && !m_wake.IsPending())
                {
                    int64_t ns = int64_t(std::ceil(-m_link / m_rate * 1e9));
                    m_wake = Simulator::Schedule(NanoSeconds(std::max<int64_t>(ns, 1)),
                                                 &QueueDisc::Run, this);
                }
                return nullptr;
            }
        }
        int pick = -1;
        int32_t leaf = -1;
        for (int c = 0; c < 3 && pick < 0; ++c) // under its rate, by priority
        {
            if ((leaf = Head(c)) >= 0 && m_tokens[c] > 0)
            {
                pick = c;
            }
        }
        for (int c = 0; c < 3 && pick < 0; ++c) // borrowing, by priority
        {
            if ((leaf = Head(c)) >= 0)
            {
                pick = c;
            }
        }
        if (pick < 0)
        {
            return nullptr;
        }
        Ptr<QueueDiscItem> item = GetInternalQueue(leaf)->Dequeue();
        if (m_host && IsTcp(item))
        {
            QueueCharge(m_node, item->GetPacket(), false);
        }
        double charge = Charge(item);
        m_tokens[pick] -= charge;
        m_link -= charge;
        sent[pick] += item->GetSize();
        packets++;
        return item;
    }

    bool CheckConfig() override
    {
        return m_rate > 0 && GetNInternalQueues() >= 3;
    }

    void InitializeParams() override
    {
    }

    double m_rate = 0;
    uint32_t m_levels = 0;
    bool m_host = false; // the egress of a host's NIC (the sender's own queue)
    uint32_t m_node = 0; // the node it sends from
    std::array<double, 3> m_fill{}, m_burst{}, m_tokens{};
    double m_last = 0;
    static constexpr double kHtbBurst = 1600; // bytes: pyroute2's default HTB burst
    double m_link = kHtbBurst;                // the link's tokens, bytes (HTB's 1:1)
    EventId m_wake;
};


} // namespace
