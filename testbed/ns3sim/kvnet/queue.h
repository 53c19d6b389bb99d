// netkv-ns3: the egress class queues (the emulation's HTB tree).
#pragma once

namespace
{

void QueueCharge(uint32_t node, Ptr<const Packet> tcpSegment, bool in); // linux_tcp.h: TSQ
void PfcCharge(Ptr<const Packet> p, uint32_t bytes, bool in); // roce.h: an ingress's bytes
void NicPulled(uint32_t node);                                  // roce.h: the NIC sends more
void WatchdogTrip(uint32_t dir, int64_t pausedNs);              // roce.h: named in `pfc`

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
        m_rng = Mix(uint64_t(g_set.seed) << 32 ^ node ^ 0x5EEDull);
        QueueSize size = g_set.byteLimit ? QueueSize(QueueSizeUnit::BYTES, limit * g_set.frameBytes)
                                         : QueueSize(QueueSizeUnit::PACKETS, limit);
        // RoCE's KV class is lossless: PFC bounds each ingress's bytes (Xoff + headroom), so
        // its leaves hold what PFC lets in (maxKv says how much that was)
        QueueSize lossless(QueueSizeUnit::BYTES, 1u << 30);
        for (uint32_t i = 0; i < levels + 3; ++i)
        {
            auto q = CreateObject<DropTailQueue<QueueDiscItem>>();
            bool kv = i >= 1 && i <= levels + 1;
            q->SetMaxSize(Roce() && kv ? lossless : size);
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
    uint64_t marked = 0;  // KV packets marked CE (DCTCP, RoCE's RED)
    uint32_t dir = 0;     // the directed link it sends on: link id x 2 + side
    // PFC (RoCE): pauses of this egress's KV class, how long it stood paused, its deepest
    // KV queue in bytes, and the pauses a watchdog broke
    uint64_t pauses = 0, pausedNs = 0, maxKv = 0, trips = 0;

    uint32_t KvPackets() const
    {
        uint32_t n = 0;
        for (uint32_t i = 1; i <= m_levels + 1; ++i)
        {
            n += GetInternalQueue(i)->GetNPackets();
        }
        return n;
    }

    uint64_t KvBytes() const
    {
        uint64_t n = 0;
        for (uint32_t i = 1; i <= m_levels + 1; ++i)
        {
            n += GetInternalQueue(i)->GetNBytes();
        }
        return n;
    }

    // A PFC frame for the KV class from the node downstream: pause (until a resume), or
    // resume. Past a watchdog's restoration the pause is ignored (a stuck queue sends).
    void PauseKv(bool on)
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        if (on == m_kvPaused || (on && now < m_ignoreUntil))
        {
            return;
        }
        m_gen++;
        if (on)
        {
            m_kvPaused = true;
            m_pausedSince = now;
            pauses++;
            uint64_t gen = m_gen;
            Simulator::Schedule(NanoSeconds(g_roce.watchdogNs), [this, gen] { Watchdog(gen); });
            return;
        }
        m_kvPaused = false;
        pausedNs += uint64_t(now - m_pausedSince);
        Run();
    }

    bool KvPaused() const
    {
        return m_kvPaused;
    }

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
        if (Roce() && cls == kKv && !m_host && RedMarks() && Mark(item, "RED"))
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
        if (Roce() && cls == kKv)
        {
            if (!m_host)
            {
                PfcCharge(item->GetPacket(), item->GetSize(), true);
            }
            maxKv = std::max<uint64_t>(maxKv, KvBytes());
        }
        return true;
    }

    // DCQCN's RED on the instantaneous KV queue: none below Kmin, Pmax rising linearly to
    // Kmax, every packet above it
    bool RedMarks()
    {
        double q = double(KvBytes());
        if (q <= g_roce.kmin)
        {
            return false;
        }
        if (q >= g_roce.kmax)
        {
            return true;
        }
        double p = g_roce.pmax * (q - g_roce.kmin) / (g_roce.kmax - g_roce.kmin);
        m_rng = Mix(m_rng + dir);
        return double(m_rng >> 11) * 0x1.0p-53 < p;
    }

    static bool IsTcp(Ptr<QueueDiscItem> item)
    {
        auto ip = DynamicCast<Ipv4QueueDiscItem>(item);
        return ip && ip->GetHeader().GetProtocol() == 6;
    }

    // Still paused by the same pause after the watchdog's time: a pause that never
    // released (a deadlock, a storm). As switches' PFC watchdogs do, drop what the queue
    // holds and ignore pauses for the restoration time, and say so.
    void Watchdog(uint64_t gen)
    {
        if (!m_kvPaused || gen != m_gen)
        {
            return;
        }
        int64_t now = Simulator::Now().GetNanoSeconds();
        WatchdogTrip(dir, now - m_pausedSince);
        trips++;
        for (uint32_t i = 1; i <= m_levels + 1; ++i)
        {
            while (Ptr<QueueDiscItem> item = GetInternalQueue(i)->Dequeue())
            {
                dropped[kKv]++;
                if (!m_host)
                {
                    PfcCharge(item->GetPacket(), item->GetSize(), false);
                }
            }
        }
        m_ignoreUntil = now + g_roce.restoreNs;
        PauseKv(false);
    }

    // the first non-empty leaf of a class (KV levels in their strict order)
    int32_t Head(int cls) const
    {
        uint32_t from = cls == kControl ? 0 : cls == kKv ? 1 : m_levels + 2;
        uint32_t to = cls == kControl ? 0 : cls == kKv ? m_levels + 1 : m_levels + 2;
        if (cls == kKv && m_kvPaused)
        {
            return -1; // PFC: the KV class holds its queue
        }
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
        if (Roce() && pick == kKv)
        {
            if (m_host)
            {
                Simulator::ScheduleNow(&NicPulled, m_node);
            }
            else
            {
                PfcCharge(item->GetPacket(), item->GetSize(), false);
            }
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
    bool m_kvPaused = false;
    int64_t m_pausedSince = 0, m_ignoreUntil = 0;
    uint64_t m_gen = 0;
    uint64_t m_rng = 0; // RED's draws, seeded per egress and run
};


} // namespace
