// netkv-ns3: Linux's TCP sender where it moves a transfer's duration, on ns-3's
// TcpSocketBase (the wheel's libraries are used as they are: this is a subclass).
//
// What the emulation's kernel does and ns-3's stock socket does not, each switched by a
// setting (Settings::twin, the scenario's ns3.twin):
//   tsq      TCP small queues: a socket keeps at most two segments' truesize (or a
//            millisecond of its pacing rate) in its host's own egress queue and holds the
//            rest itself, so a host never drops its own data (tcp_small_queue_check)
//   restart  slow-start restart after idle: new data on a connection silent for more than
//            an RTO starts again from min(IW, cwnd) (tcp_slow_start_after_idle)
//   rto      the RTO as Linux computes it: srtt + max(rto_min, mdev), mdev being 4x the
//            mean deviation, slow to grow when the RTT falls (tcp_rtt_estimator), where
//            RFC 6298 and ns-3 take max(rto_min, srtt + 4 rttvar)
//   tlp      the tail loss probe: 2 srtt (plus rto_min with one segment out) after the
//            last send or ACK, one new segment or the last one again (tcp_send_loss_probe)
//   rack     RACK's loss detection on a fabric that never reorders (its reordering
//            window of a quarter min-RTT taken as zero): a hole is lost once a later
//            segment is SACKed (ns-3's duplicate-ACK threshold of one, set where the stack
//            is built), and, what RFC 6675 recovery cannot see, a retransmission is lost
//            once a segment sent after it is delivered: it is sent again at once instead
//            of waiting out an RTO (tcp_rack_detect_loss)
#pragma once

namespace
{

class LinuxTcp;
std::vector<LinuxTcp*> g_linux; // every one made (they live as long as the run)

// The sockets TSQ follows, by (node, local port): what a host's egress queue charges
std::map<std::pair<uint32_t, uint16_t>, Ptr<LinuxTcp>> g_tsq;

constexpr uint32_t kSkbOverhead = 960; // bytes of an skb's truesize besides its segment
uint64_t g_probes = 0, g_restarts = 0;  // tail loss probes sent, slow-start restarts
uint64_t g_relost = 0;                  // retransmissions RACK found lost and sent again

class LinuxTcp : public TcpSocketBase
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("netkv::LinuxTcp").SetParent<TcpSocketBase>().AddConstructor<LinuxTcp>();
        return tid;
    }

    LinuxTcp()
    {
        g_linux.push_back(this);
    }

    LinuxTcp(const LinuxTcp& o) // an accepted socket, forked from its listener
        : TcpSocketBase(o)
    {
        g_linux.push_back(this);
    }

    // A line for a socket with data still to deliver (the `sockets` command): where a
    // connection that never finishes stands
    void Describe(std::ostream& out) const
    {
        uint32_t unsent = m_txBuffer->SizeFromSequence(m_tcb->m_highTxMark);
        if (UnAckDataCount() == 0 && unsent == 0)
        {
            return;
        }
        out << "s state=" << m_state << " ca=" << int(m_tcb->m_congState.Get())
            << " unacked=" << UnAckDataCount() << " unsent=" << unsent
            << " inflight=" << BytesInFlight() << " cwnd=" << m_tcb->m_cWnd.Get()
            << " rwnd=" << m_rWnd.Get() << " rto_pending=" << m_retxEvent.IsPending()
            << " probe_out=" << m_probeOut << " throttled=" << m_throttled
            << " queued=" << m_queued << " " << *m_txBuffer << "\n";
    }

    TypeId GetInstanceTypeId() const override
    {
        return GetTypeId();
    }

    // -- TSQ: its host's egress queue charges and releases this socket's segments -------
    void Charge(uint32_t bytes)
    {
        m_queued += bytes + kSkbOverhead;
    }

    void Release(uint32_t bytes)
    {
        m_queued -= std::min<uint64_t>(m_queued, bytes + kSkbOverhead);
        if (m_throttled && !m_resume.IsPending() && !Full())
        {
            m_resume = Simulator::ScheduleNow(&LinuxTcp::Resume, this);
        }
    }

    // -- slow-start restart after idle: called before a shard's first write -------------
    void RestartIfIdle()
    {
        if (!Has("restart") || m_lastSendNs < 0 || UnAckDataCount() > 0)
        {
            return;
        }
        int64_t rto = m_rto.Get().GetNanoSeconds();
        int64_t idle = Simulator::Now().GetNanoSeconds() - m_lastSendNs;
        if (idle <= rto || rto <= 0)
        {
            return;
        }
        uint32_t cwnd = m_tcb->m_cWnd;
        uint32_t restart = std::min(m_tcb->m_initialCWnd * m_tcb->m_segmentSize, cwnd);
        if (m_tcb->m_congState == TcpSocketState::CA_OPEN ||
            m_tcb->m_congState == TcpSocketState::CA_DISORDER)
        {
            m_tcb->m_ssThresh = std::max(m_tcb->m_ssThresh.Get(), cwnd / 4 * 3);
        }
        for (idle -= rto; idle > 0 && cwnd > restart; idle -= rto)
        {
            cwnd >>= 1;
        }
        m_tcb->m_cWnd = std::max(cwnd, restart);
        m_tcb->m_cWndInfl = m_tcb->m_cWnd;
        g_restarts++;
    }

  protected:
    Ptr<TcpSocketBase> Fork() override
    {
        return CopyObject<LinuxTcp>(this);
    }

    uint32_t AvailableWindow() const override
    {
        uint32_t w = TcpSocketBase::AvailableWindow();
        // Linux counts cwnd in segments and never under one; ns-3 counts bytes, and a
        // window cut below a segment (DCTCP's cut during CWR recovery) with nothing in
        // flight sends nothing and arms no timer: the connection would wait forever
        uint32_t mss = m_tcb->m_segmentSize;
        if (w < mss && m_tcb->m_cWnd < mss && BytesInFlight() == 0)
        {
            w = std::min(mss, m_rWnd.Get());
        }
        if (w > 0 && Has("tsq") && Full())
        {
            m_throttled = true;
            return 0;
        }
        return w;
    }

    uint32_t SendDataPacket(SequenceNumber32 seq, uint32_t maxSize, bool withAck) override
    {
        bool fresh = seq >= m_tcb->m_highTxMark;
        uint32_t sz = TcpSocketBase::SendDataPacket(seq, maxSize, withAck);
        if (sz > 0)
        {
            m_lastSendNs = Simulator::Now().GetNanoSeconds();
            if (Has("rack"))
            {
                m_sent[seq.GetValue()] = Sent{sz, m_lastSendNs, !fresh, false};
            }
            if (fresh)
            {
                m_lastSeg = sz;
                ArmProbe(false);
            }
        }
        return sz;
    }

    void ReceivedAck(Ptr<Packet> packet, const TcpHeader& header) override
    {
        TcpSocketBase::ReceivedAck(packet, header);
        if (Has("rack") && !m_sent.empty())
        {
            Rack(header);
        }
        if (m_probeOut && header.GetAckNumber() >= m_probeHigh)
        {
            m_probeOut = false; // the probe's episode is over
        }
        if (UnAckDataCount() > 0)
        {
            ArmProbe(true);
        }
        KeepRtoArmed();
    }

    void ReTxTimeout() override
    {
        m_lossNs = Simulator::Now().GetNanoSeconds();
        TcpSocketBase::ReTxTimeout();
        KeepRtoArmed();
    }

    // Linux's invariant: while data is out, a retransmission timer runs. ns-3 arms its own
    // only when it sends, so a timeout that sends nothing (TSQ holding the socket, the
    // window spoken for) or a window spoken for by a segment counted in flight would
    // leave a connection waiting for ever.
    void KeepRtoArmed()
    {
        if ((m_state == ESTABLISHED || m_state == CLOSE_WAIT) && UnAckDataCount() > 0 &&
            !m_retxEvent.IsPending() && !m_persistEvent.IsPending())
        {
            m_retxEvent = Simulator::Schedule(m_rto, &LinuxTcp::ReTxTimeout, this);
        }
    }

  private:
    bool Has(const char* feature) const
    {
        return g_set.twin.count(feature) > 0;
    }

    // Linux's tcp_small_queue_check: at most two full segments' truesize queued below the
    // socket, or a millisecond of its pacing rate (2x cwnd/srtt in slow start, 1.2x after)
    // if that is more; a socket with at most one segment unacknowledged always sends.
    bool Full() const
    {
        if (m_queued == 0 || UnAckDataCount() <= m_tcb->m_segmentSize)
        {
            return false;
        }
        double limit = 2.0 * (m_tcb->m_segmentSize + 40 + kSkbOverhead);
        double srtt = m_tcb->m_srtt.Get().GetSeconds();
        if (srtt > 0)
        {
            double gain = m_tcb->m_cWnd < m_tcb->m_ssThresh ? 2.0 : 1.2;
            double pacing = gain * std::max<double>(m_tcb->m_cWnd.Get(), m_tcb->m_bytesInFlight.Get()) / srtt;
            limit = std::max(limit, pacing * double(g_set.tsqWindowNs) * 1e-9);
        }
        return double(m_queued) >= limit;
    }

    void Resume()
    {
        m_throttled = false;
        if (m_state == ESTABLISHED || m_state == CLOSE_WAIT)
        {
            SendPendingData(m_connected);
            KeepRtoArmed();
        }
    }

    // Linux's tcp_schedule_loss_probe, re-armed after every new segment and every ACK
    // while data is out: 2 srtt, plus rto_min with one segment out (else 2 jiffies), never
    // later than the RTO. `fromAck`: the RTO was just re-armed, its full span ahead.
    void ArmProbe(bool fromAck)
    {
        if (!Has("tlp") || m_probeOut || !m_sackEnabled ||
            (m_tcb->m_congState != TcpSocketState::CA_OPEN &&
             m_tcb->m_congState != TcpSocketState::CA_CWR) ||
            (m_state != ESTABLISHED && m_state != CLOSE_WAIT))
        {
            return;
        }
        int64_t srtt = m_tcb->m_srtt.Get().GetNanoSeconds();
        int64_t wait = srtt <= 0 ? 1000000000
                                 : 2 * srtt + (UnAckDataCount() <= m_tcb->m_segmentSize
                                                   ? g_set.rtoMinNs
                                                   : g_set.tlpMinNs);
        int64_t rto = fromAck || !m_retxEvent.IsPending()
                          ? m_rto.Get().GetNanoSeconds()
                          : Simulator::GetDelayLeft(m_retxEvent).GetNanoSeconds();
        wait = std::max<int64_t>(1, std::min(wait, rto));
        m_probeAt = Simulator::Now().GetNanoSeconds() + wait;
        if (m_probe.IsPending() && Simulator::GetDelayLeft(m_probe).GetNanoSeconds() <= wait)
        {
            return; // it fires first, finds the deadline moved and waits on
        }
        m_probe.Cancel();
        m_probe = Simulator::Schedule(NanoSeconds(wait), &LinuxTcp::Probe, this);
    }

    void Probe()
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        if (now < m_probeAt)
        {
            m_probe = Simulator::Schedule(NanoSeconds(m_probeAt - now), &LinuxTcp::Probe, this);
            return;
        }
        if (m_probeOut || UnAckDataCount() == 0 ||
            (m_tcb->m_congState != TcpSocketState::CA_OPEN &&
             m_tcb->m_congState != TcpSocketState::CA_CWR) ||
            (m_state != ESTABLISHED && m_state != CLOSE_WAIT))
        {
            return;
        }
        uint32_t sent = 0;
        uint32_t unsent = m_txBuffer->SizeFromSequence(m_tcb->m_highTxMark);
        if (unsent > 0 && m_rWnd.Get() > UnAckDataCount()) // new data, whatever cwnd says
        {
            sent = SendDataPacket(m_tcb->m_highTxMark, std::min(unsent, m_tcb->m_segmentSize),
                                  true);
        }
        else if (m_lastSeg > 0)
        { // else the last segment again, what of it is not acknowledged yet
            uint32_t high = m_tcb->m_highTxMark.Get().GetValue();
            uint32_t from = std::max(high - m_lastSeg, m_txBuffer->HeadSequence().GetValue());
            if (from < high && !Sacked(from, high))
            {
                sent = SendDataPacket(SequenceNumber32(from), high - from, true);
            }
        }
        if (sent == 0)
        {
            return;
        }
        g_probes++;
        m_probeOut = true;
        m_probeHigh = m_tcb->m_highTxMark;
        m_retxEvent.Cancel(); // the RTO counts again from the probe (tcp_rearm_rto)
        KeepRtoArmed();
    }

    // RACK: what each outstanding segment was (by its first sequence number), when it
    // was last sent, whether that was a retransmission and whether it has been SACKed
    struct Sent
    {
        uint32_t size;
        int64_t sentNs;
        bool retransmitted, sacked;
    };

    // The most recent send time among the segments this ACK delivers (cumulatively or by
    // SACK), then every retransmission sent before it and still undelivered sent again.
    // A delivered retransmission's send time counts only if its round trip is at least
    // the least seen (else the original's delivery is what arrived).
    void Rack(const TcpHeader& header)
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        int64_t minRtt = m_tcb->m_minRtt.IsStrictlyPositive() && m_tcb->m_minRtt != Time::Max()
                             ? m_tcb->m_minRtt.GetNanoSeconds()
                             : 0;
        auto delivered = [&](const Sent& x) {
            if (!x.retransmitted || now - x.sentNs >= minRtt)
            {
                m_rackXmitNs = std::max(m_rackXmitNs, x.sentNs);
            }
        };
        uint32_t una = header.GetAckNumber().GetValue();
        while (!m_sent.empty() && m_sent.begin()->first + m_sent.begin()->second.size <= una)
        {
            if (!m_sent.begin()->second.sacked)
            {
                delivered(m_sent.begin()->second);
            }
            m_sent.erase(m_sent.begin());
        }
        if (auto opt = header.GetOption(TcpOption::SACK))
        {
            // a segment that overlaps a block counts as SACKed: ns-3's scoreboard may hold
            // it in other pieces than it was sent in, and one never sends a SACKed piece
            for (const auto& [lo, hi] : DynamicCast<const TcpOptionSack>(opt)->GetSackList())
            {
                auto it = m_sent.lower_bound(lo.GetValue());
                if (it != m_sent.begin() && std::prev(it)->first + std::prev(it)->second.size >
                                                lo.GetValue())
                {
                    --it;
                }
                for (; it != m_sent.end() && it->first < hi.GetValue(); ++it)
                {
                    if (!it->second.sacked)
                    {
                        it->second.sacked = true;
                        delivered(it->second);
                    }
                }
            }
        }
        if (m_state != ESTABLISHED && m_state != CLOSE_WAIT)
        {
            return;
        }
        // after a timeout ns-3 counts no duplicate ACK (CA_LOSS) and marks lost only what
        // was out when it fired: new data sent since and lost waits out another timeout
        // where Linux's RACK sees it lost as any other
        bool loss = m_tcb->m_congState == TcpSocketState::CA_LOSS;
        uint32_t head = m_txBuffer->HeadSequence().GetValue();
        for (auto& [seq, x] : m_sent)
        {
            bool again = x.retransmitted || (loss && x.sentNs >= m_lossNs);
            uint32_t from = std::max(seq, head); // a piece may be acknowledged already
            if (again && !x.sacked && x.sentNs < m_rackXmitNs && from < seq + x.size &&
                !Sacked(from, seq + x.size))
            {
                SendDataPacket(SequenceNumber32(from), seq + x.size - from, true); // lost again
                g_relost++;
            }
        }
    }

    // Whether ns-3's scoreboard holds any of [lo, hi) SACKed. It keeps its items private,
    // but prints them ("{[a;b|n][lost],[retrans],[sacked]}..."); a SACKed item must never
    // be sent again (its buffer asserts so), and resends are few.
    bool Sacked(uint32_t lo, uint32_t hi) const
    {
        std::ostringstream out;
        out << *m_txBuffer;
        const std::string text = out.str();
        for (size_t at = text.find("{["); at != std::string::npos; at = text.find("{[", at + 2))
        {
            size_t semi = text.find(';', at), bar = text.find('|', at), end = text.find('}', at);
            uint32_t a = std::stoul(text.substr(at + 2, semi - at - 2));
            uint32_t b = std::stoul(text.substr(semi + 1, bar - semi - 1));
            if (a < hi && lo < b && text.substr(at, end - at).find("[sacked") != std::string::npos)
            {
                return true;
            }
        }
        return false;
    }

    std::map<uint32_t, Sent> m_sent;
    int64_t m_rackXmitNs = -1;
    int64_t m_lossNs = 0; // when the last retransmission timeout fired
    uint64_t m_queued = 0; // truesize bytes of its segments in its host's egress queue
    mutable bool m_throttled = false;
    EventId m_resume;
    int64_t m_lastSendNs = -1;
    uint32_t m_lastSeg = 0; // bytes of the last new segment sent
    EventId m_probe;
    int64_t m_probeAt = 0;
    bool m_probeOut = false;
    SequenceNumber32 m_probeHigh{0};
};

// A TCP socket on `node` as the emulation's kernel runs it: a LinuxTcp with Linux's RTT
// estimator (a listener's accepted sockets are forked from it, so they are too), or ns-3's
// own socket when no Linux behaviour is asked for.
Ptr<Socket>
NewSocket(uint32_t node)
{
    Ptr<Node> n = g_nodes[node].node;
    static const char* kTcp[] = {"tsq", "restart", "rto", "tlp", "rack"};
    if (std::none_of(std::begin(kTcp), std::end(kTcp),
                     [](const char* f) { return g_set.twin.count(f) > 0; }))
    {
        return Socket::CreateSocket(n, TcpSocketFactory::GetTypeId());
    }
    Ptr<TcpL4Protocol> tcp = n->GetObject<TcpL4Protocol>();
    auto sock = CreateObject<LinuxTcp>();
    ObjectFactory cc, recovery;
    cc.SetTypeId(g_set.congestion);
    recovery.SetTypeId("ns3::TcpPrrRecovery");
    sock->SetNode(n);
    sock->SetTcp(tcp);
    sock->SetRtt(g_set.twin.count("rto") ? Ptr<RttEstimator>(CreateObject<LinuxRtt>())
                                          : Ptr<RttEstimator>(CreateObject<RttMeanDeviation>()));
    sock->SetCongestionControlAlgorithm(cc.Create<TcpCongestionOps>());
    sock->SetRecoveryAlgorithm(recovery.Create<TcpRecoveryOps>());
    tcp->AddSocket(sock);
    return sock;
}

// Follow a bound sender's segments through its host's egress queue (TSQ).
void
FollowQueue(uint32_t node, Ptr<Socket> sock)
{
    auto lt = DynamicCast<LinuxTcp>(sock);
    if (!lt)
    {
        return;
    }
    Address local;
    sock->GetSockName(local);
    g_tsq[{node, InetSocketAddress::ConvertFrom(local).GetPort()}] = lt;
}

// What a host's egress queue calls for every TCP segment it takes in (+) and sends (-)
void
QueueCharge(uint32_t node, Ptr<const Packet> tcpSegment, bool in)
{
    uint8_t b[2];
    if (tcpSegment->GetSize() < 2 || g_tsq.empty())
    {
        return;
    }
    tcpSegment->CopyData(b, 2);
    auto it = g_tsq.find({node, uint16_t(b[0] << 8 | b[1])});
    if (it == g_tsq.end())
    {
        return;
    }
    in ? it->second->Charge(tcpSegment->GetSize()) : it->second->Release(tcpSegment->GetSize());
}

} // namespace
