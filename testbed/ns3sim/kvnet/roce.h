// netkv-ns3: RoCE: KV shards as RDMA writes under DCQCN, and PFC for the KV class.
#pragma once

namespace
{

// ---------------------------------------------------------------------------------------
// RDMA over Converged Ethernet v2, written from the published specifications (DCQCN: Zhu
// et al., SIGCOMM 2015; PFC: IEEE 802.1Qbb): a shard is one RDMA write on a queue pair of
// its own from the prefill's NIC. The NIC paces each QP at its DCQCN rate and takes the
// next packet from the QP whose turn is due whenever its egress holds fewer than two.
// Loss is recovered by go-back-N (the receiver NAKs the PSN it expects, the sender sends
// again from there), as ConnectX NICs before selective repeat and the field's ns-3 RDMA
// simulators do: under PFC a loss is a failure (a link down, a watchdog's drop), not
// congestion, so the simpler recovery costs nothing in the common case. Where no NAK can
// come (the tail was lost), a timeout sends again from the last PSN acknowledged.

constexpr uint16_t kRocePort = 4791; // RoCEv2's UDP port
constexpr uint32_t kRoceHeader = 16; // type, last, flow id, PSN: the BTH's 12 and ICRC's 4
constexpr uint32_t kRoceWire = kRoceHeader + 8 + 20 + 2; // + UDP, IPv4, PPP
constexpr uint8_t kCnpTos = 48 << 2; // CNPs in the control class (ConnectX's CNP DSCP 48)
constexpr uint8_t kEct0 = 0x02;

enum : uint8_t
{
    kRoceData = 0,
    kRoceAck = 1,
    kRoceNak = 2,
    kRoceCnp = 3,
};

struct Qp
{
    uint32_t fid, src, dst;
    uint64_t bytes;
    uint32_t npkts;
    uint8_t tos;
    double line; // the NIC's rate, bit/s
    double rc, rt;
    double alpha = 1;
    uint32_t sndNxt = 0, sndUna = 0;
    double nextNs = 0; // when the pacer lets its next packet go
    double bc = 0;     // bytes since the last byte-counter event
    uint32_t tStage = 0, bcStage = 0;
    bool cnpSeen = false;
    uint64_t pace = 0; // bytes/s cap (Karuna's minimum rate), 0: none
    Ptr<Socket> sock;
    uint16_t sport = 0;
    EventId alphaTimer, rateTimer, rto;
    uint64_t retx = 0, timeouts = 0;
    int64_t timeoutNs = 0;
};

struct RoceRx
{
    uint32_t expected = 0;
    uint64_t received = 0;
    int64_t lastCnp = INT64_MIN / 2, lastNak = INT64_MIN / 2;
    uint32_t nakFor = UINT32_MAX;
    Ptr<Socket> reply; // ACKs and NAKs in the QP's own class
    uint8_t tos = 0;
};

struct PfcIngress
{
    uint64_t bytes = 0, max = 0;
    bool xoff = false;
};

std::map<uint32_t, Qp*> g_qps;                // live QPs by flow id
std::unordered_map<uint32_t, RoceRx> g_rx;   // receivers' state by flow id
std::vector<std::vector<Qp*>> g_nic;         // per host: its live QPs
std::vector<EventId> g_nicWake;
std::vector<Ptr<Socket>> g_cnpSock;          // per host: CNPs leave here
std::vector<PfcIngress> g_pfc;               // per directed link: at the switch it enters
std::vector<std::string> g_trips;            // watchdog trips, as `pfc` says them
uint64_t g_cnps = 0, g_naks = 0, g_roceTimeouts = 0;

Ptr<Packet>
RocePacket(uint8_t type, bool last, uint32_t fid, uint32_t psn, uint32_t payload)
{
    uint8_t b[kRoceHeader] = {type, uint8_t(last)};
    for (int i = 0; i < 4; ++i)
    {
        b[4 + i] = uint8_t(fid >> (24 - 8 * i));
        b[8 + i] = uint8_t(psn >> (24 - 8 * i));
    }
    Ptr<Packet> p = Create<Packet>(b, kRoceHeader);
    if (payload > 0)
    {
        p->AddPaddingAtEnd(payload);
    }
    return p;
}

void
ParseRoce(Ptr<Packet> p, uint8_t& type, bool& last, uint32_t& fid, uint32_t& psn)
{
    uint8_t b[kRoceHeader] = {};
    p->CopyData(b, kRoceHeader);
    type = b[0];
    last = b[1] != 0;
    fid = psn = 0;
    for (int i = 0; i < 4; ++i)
    {
        fid = fid << 8 | b[4 + i];
        psn = psn << 8 | b[8 + i];
    }
}

Ptr<ClassQueueDisc>
HostQueue(uint32_t node)
{
    const Link& l = g_links[g_nodes[node].links[0]];
    return l.a == node ? l.qA : l.qB;
}

// -- DCQCN's reaction point ---------------------------------------------------------------

void
Increase(Qp* q)
{
    uint32_t lo = std::min(q->tStage, q->bcStage), hi = std::max(q->tStage, q->bcStage);
    uint32_t f = g_roce.fastRecovery;
    if (lo > f) // hyper increase: both counters past F
    {
        q->rt += (lo - f) * g_roce.rhai;
    }
    else if (hi > f) // additive increase: one counter past F
    {
        q->rt += g_roce.rai;
    } // else fast recovery: halfway back to the target
    q->rt = std::min(q->rt, q->line);
    q->rc = std::min(q->line, (q->rt + q->rc) / 2);
}

void
RateTimer(uint32_t fid)
{
    auto it = g_qps.find(fid);
    if (it == g_qps.end())
    {
        return;
    }
    Qp* q = it->second;
    q->tStage++;
    Increase(q);
    if (q->rc < q->line)
    {
        q->rateTimer = Simulator::Schedule(NanoSeconds(g_roce.rateNs), &RateTimer, fid);
    }
}

void
AlphaTimer(uint32_t fid)
{
    auto it = g_qps.find(fid);
    if (it == g_qps.end())
    {
        return;
    }
    Qp* q = it->second;
    if (!q->cnpSeen)
    {
        q->alpha *= 1 - g_roce.g;
    }
    q->cnpSeen = false;
    q->alphaTimer = Simulator::Schedule(NanoSeconds(g_roce.alphaNs), &AlphaTimer, fid);
}

void
Cut(Qp* q)
{
    q->rt = q->rc;
    q->rc = std::max(g_roce.minRate, q->rc * (1 - q->alpha / 2));
    q->alpha = (1 - g_roce.g) * q->alpha + g_roce.g;
    q->cnpSeen = true;
    q->tStage = q->bcStage = 0;
    q->bc = 0;
    q->rateTimer.Cancel();
    q->rateTimer = Simulator::Schedule(NanoSeconds(g_roce.rateNs), &RateTimer, q->fid);
    if (!q->alphaTimer.IsPending())
    {
        q->alphaTimer = Simulator::Schedule(NanoSeconds(g_roce.alphaNs), &AlphaTimer, q->fid);
    }
}

// -- the NIC: pacing, sending, go-back-N ----------------------------------------------

void NicKick(uint32_t node);
void OnRto(uint32_t fid);

void
SendData(Qp* q)
{
    uint32_t psn = q->sndNxt++;
    bool last = psn + 1 == q->npkts;
    uint32_t payload = last ? uint32_t(q->bytes - uint64_t(psn) * g_roce.mtu) : g_roce.mtu;
    q->sock->Send(RocePacket(kRoceData, last, q->fid, psn, payload));
    double wire = payload + kRoceWire;
    double rate = q->pace > 0 ? std::min(q->rc, q->pace * 8.0) : q->rc;
    double now = double(Simulator::Now().GetNanoSeconds());
    q->nextNs = std::max(q->nextNs, now) + wire * 8 / rate * 1e9;
    if (q->rc < q->line) // the byte counter: an increase event every B bytes sent
    {
        q->bc += wire;
        if (q->bc >= g_roce.byteCounter)
        {
            q->bc -= g_roce.byteCounter;
            q->bcStage++;
            Increase(q);
        }
    }
    if (!q->rto.IsPending())
    {
        q->rto = Simulator::Schedule(NanoSeconds(g_roce.timeoutNs), &OnRto, q->fid);
    }
}

// The NIC takes another packet while its egress holds fewer than two KV packets (it is
// paused by PFC, or busy, otherwise): from the QP whose pacer is due first.
void
NicKick(uint32_t node)
{
    Ptr<ClassQueueDisc> q = HostQueue(node);
    double now = double(Simulator::Now().GetNanoSeconds());
    while (q->KvPackets() < 2)
    {
        Qp* best = nullptr;
        for (Qp* x : g_nic[node])
        {
            if (x->sndNxt < x->npkts && (!best || x->nextNs < best->nextNs))
            {
                best = x;
            }
        }
        if (!best)
        {
            return;
        }
        if (best->nextNs > now)
        {
            int64_t at = int64_t(std::ceil(best->nextNs));
            EventId& wake = g_nicWake[node];
            if (!wake.IsPending() || wake.GetTs() > uint64_t(at))
            {
                wake.Cancel();
                wake = Simulator::Schedule(NanoSeconds(at - int64_t(now)), &NicKick, node);
            }
            return;
        }
        SendData(best);
    }
}

void
NicPulled(uint32_t node)
{
    NicKick(node);
}

void
OnRto(uint32_t fid)
{
    auto it = g_qps.find(fid);
    if (it == g_qps.end())
    {
        return;
    }
    Qp* q = it->second;
    if (q->sndUna >= q->sndNxt)
    {
        return;
    }
    q->timeouts++;
    g_roceTimeouts++;
    q->timeoutNs += g_roce.timeoutNs;
    q->retx += q->sndNxt - q->sndUna;
    q->sndNxt = q->sndUna;
    NicKick(q->src);
}

void
RoceDrop(Qp* q)
{
    q->alphaTimer.Cancel();
    q->rateTimer.Cancel();
    q->rto.Cancel();
    auto& nic = g_nic[q->src];
    nic.erase(std::remove(nic.begin(), nic.end(), q), nic.end());
    q->sock->Close();
    g_qps.erase(q->fid);
    delete q;
}

void
RoceFinish(Qp* q)
{
    std::ostringstream line;
    line << "done " << q->fid << " " << Simulator::Now().GetNanoSeconds() << " " << q->retx
         << " " << q->timeouts << " " << q->timeoutNs << " 0 0 "
         << PathOf(q->src, q->dst, q->sport, kRocePort, 17);
    g_done.push_back(line.str());
    RoceDrop(q);
    Simulator::Stop(); // control goes back to Python at this instant
}

// What comes back to a QP: ACKs (cumulative), NAKs (go back to this PSN), CNPs (cut).
void
OnQpReply(uint32_t fid, Ptr<Socket> sock)
{
    Ptr<Packet> p;
    while ((p = sock->Recv()))
    {
        auto it = g_qps.find(fid);
        if (it == g_qps.end())
        {
            return;
        }
        Qp* q = it->second;
        uint8_t type;
        bool last;
        uint32_t f, psn;
        ParseRoce(p, type, last, f, psn);
        if (type == kRoceAck && psn + 1 > q->sndUna)
        {
            q->sndUna = psn + 1;
            q->rto.Cancel();
            if (q->sndUna == q->npkts)
            {
                RoceFinish(q);
                return;
            }
            if (q->sndUna < q->sndNxt)
            {
                q->rto = Simulator::Schedule(NanoSeconds(g_roce.timeoutNs), &OnRto, fid);
            }
        }
        else if (type == kRoceNak && psn >= q->sndUna)
        {
            q->sndUna = psn;
            if (q->sndNxt > psn)
            {
                q->retx += q->sndNxt - psn;
                q->sndNxt = psn;
            }
            g_naks++;
            NicKick(q->src);
        }
        else if (type == kRoceCnp)
        {
            Cut(q);
        }
    }
}

// -- DCQCN's notification point and the responder ------------------------------------

void
Reply(RoceRx& rx, uint32_t host, const Address& to, uint8_t type, uint32_t fid, uint32_t psn)
{
    if (!rx.reply)
    {
        rx.reply = Socket::CreateSocket(g_nodes[host].node, UdpSocketFactory::GetTypeId());
        rx.reply->Bind();
    }
    rx.reply->SetIpTos(rx.tos);
    rx.reply->SendTo(RocePacket(type, false, fid, psn, 0), 0, to);
}

void
OnRoceData(uint32_t host, Ptr<Socket> sock)
{
    Address from;
    Ptr<Packet> p;
    while ((p = sock->RecvFrom(from)))
    {
        uint8_t type;
        bool last;
        uint32_t fid, psn;
        ParseRoce(p, type, last, fid, psn);
        if (type != kRoceData)
        {
            continue;
        }
        SocketIpTosTag tag;
        uint8_t tos = p->PeekPacketTag(tag) ? tag.GetTos() : 0;
        RoceRx& rx = g_rx[fid];
        rx.tos = uint8_t(tos & ~3u);
        int64_t now = Simulator::Now().GetNanoSeconds();
        if ((tos & 3) == 3 && now - rx.lastCnp >= g_roce.cnpNs) // CE: one CNP per interval
        {
            rx.lastCnp = now;
            g_cnps++;
            g_cnpSock[host]->SendTo(RocePacket(kRoceCnp, false, fid, 0, 0), 0, from);
        }
        if (psn == rx.expected)
        {
            rx.expected++;
            rx.received += p->GetSize() - kRoceHeader;
            if (last || rx.expected % g_roce.ackEvery == 0)
            {
                Reply(rx, host, from, kRoceAck, fid, psn);
            }
        }
        else if (psn > rx.expected)
        {
            if (rx.nakFor != rx.expected || now - rx.lastNak >= g_roce.nakNs)
            {
                rx.nakFor = rx.expected;
                rx.lastNak = now;
                Reply(rx, host, from, kRoceNak, fid, rx.expected);
            }
        }
        else if (last) // the tail again: its ACK was lost
        {
            Reply(rx, host, from, kRoceAck, fid, rx.expected - 1);
        }
    }
}

// -- the control plane's commands --------------------------------------------------------

void
RoceStart(uint32_t fid, uint32_t src, uint32_t dst, uint64_t bytes, uint8_t tos, uint64_t pace)
{
    auto* q = new Qp{fid, src, dst, std::max<uint64_t>(bytes, 1)};
    q->npkts = uint32_t((q->bytes + g_roce.mtu - 1) / g_roce.mtu);
    q->tos = tos;
    q->line = HostQueue(src)->Rate();
    q->rc = q->rt = q->line;
    q->pace = pace;
    q->nextNs = double(Simulator::Now().GetNanoSeconds());
    q->sock = Socket::CreateSocket(g_nodes[src].node, UdpSocketFactory::GetTypeId());
    q->sock->Bind();
    Address local;
    q->sock->GetSockName(local);
    q->sport = InetSocketAddress::ConvertFrom(local).GetPort();
    q->sock->SetIpTos(uint8_t(tos | kEct0));
    q->sock->Connect(InetSocketAddress(g_nodes[dst].ip, kRocePort));
    q->sock->SetRecvCallback(MakeBoundCallback(&OnQpReply, fid));
    g_qps[fid] = q;
    g_nic[src].push_back(q);
    NicKick(src);
}

Qp*
LiveQp(uint32_t fid)
{
    auto it = g_qps.find(fid);
    return it == g_qps.end() ? nullptr : it->second;
}

// -- PFC --------------------------------------------------------------------------------

// Bytes of the KV class a switch holds from one ingress: above Xoff the upstream egress is
// paused, at Xon or below it resumes. The frame takes the link's delay and its own 64
// bytes to arrive (the reverse direction's frame on the wire is in the headroom).
void
SendPfc(uint32_t dir, bool on)
{
    const Link& l = g_links[dir / 2];
    Ptr<ClassQueueDisc> q = dir % 2 == 0 ? l.qA : l.qB;
    int64_t ns = l.delayNs + int64_t(std::ceil(64 * 8 / l.rateBps * 1e9));
    Simulator::Schedule(NanoSeconds(ns), [q, on] { q->PauseKv(on); });
}

void
PfcCharge(Ptr<const Packet> p, uint32_t bytes, bool in)
{
    IngressTag tag;
    if (!p->PeekPacketTag(tag))
    {
        return;
    }
    PfcIngress& st = g_pfc[tag.dir];
    if (in)
    {
        st.bytes += bytes;
        st.max = std::max(st.max, st.bytes);
        if (!st.xoff && double(st.bytes) > g_roce.xoff)
        {
            st.xoff = true;
            SendPfc(tag.dir, true);
        }
        return;
    }
    st.bytes -= std::min<uint64_t>(bytes, st.bytes);
    if (st.xoff && double(st.bytes) <= g_roce.xon)
    {
        st.xoff = false;
        SendPfc(tag.dir, false);
    }
}

// What an ingress may hold above Xoff: the packet that crossed it, the link's bytes in flight
// both ways, the frame being sent when the pause lands, the one ahead of the pause on the
// reverse wire, and the pause frame itself.
double
Headroom(uint32_t dir)
{
    const Link& l = g_links[dir / 2];
    return 2 * l.rateBps / 8 * l.delayNs * 1e-9 + 3 * double(g_roce.mtu + kRoceWire) + 64;
}

void
WatchdogTrip(uint32_t dir, int64_t pausedNs)
{
    std::ostringstream line;
    line << "w " << dir / 2 << " " << dir % 2 << " " << Simulator::Now().GetNanoSeconds() << " "
         << pausedNs;
    g_trips.push_back(line.str());
}

// The RoCE parts' state: per directed link (LINK SIDE PAUSES PAUSED_NS MAX_KV_BYTES MARKS
// KV_DROPS MAX_INGRESS_BYTES HEADROOM PAUSED_NOW KV_BYTES_NOW; PAUSED_NS counts released
// pauses), each
// watchdog trip (w LINK SIDE T PAUSED_NS), the totals (g CNPS NAKS TIMEOUTS LIVE_QPS)
void
PfcReport()
{
    for (uint32_t dir = 0; dir < 2 * g_links.size(); ++dir)
    {
        const Link& l = g_links[dir / 2];
        Ptr<ClassQueueDisc> q = dir % 2 == 0 ? l.qA : l.qB;
        std::cout << "l " << dir / 2 << " " << dir % 2 << " " << q->pauses << " " << q->pausedNs << " "
                  << q->maxKv << " " << q->marked << " " << q->dropped[1] << " "
                  << (dir < g_pfc.size() ? g_pfc[dir].max : 0) << " "
                  << uint64_t(std::llround(Headroom(dir))) << " " << (q->KvPaused() ? 1 : 0)
                  << " " << q->KvBytes() << "\n";
    }
    for (const auto& t : g_trips)
    {
        std::cout << t << "\n";
    }
    std::cout << "g " << g_cnps << " " << g_naks << " " << g_roceTimeouts << " " << g_qps.size()
              << "\n";
}

void
RoceBuild()
{
    g_nic.assign(g_nodes.size(), {});
    g_nicWake.assign(g_nodes.size(), EventId());
    g_cnpSock.assign(g_nodes.size(), nullptr);
    g_pfc.assign(2 * g_links.size(), PfcIngress());
    for (uint32_t id = 0; id < g_nodes.size(); ++id)
    {
        if (!g_nodes[id].host)
        {
            continue;
        }
        Ptr<Socket> rx = Socket::CreateSocket(g_nodes[id].node, UdpSocketFactory::GetTypeId());
        rx->Bind(InetSocketAddress(Ipv4Address::GetAny(), kRocePort));
        rx->SetIpRecvTos(true);
        rx->SetRecvCallback(MakeBoundCallback(&OnRoceData, id));
        g_listeners.push_back(rx);
        g_cnpSock[id] = Socket::CreateSocket(g_nodes[id].node, UdpSocketFactory::GetTypeId());
        g_cnpSock[id]->Bind();
        g_cnpSock[id]->SetIpTos(kCnpTos);
    }
}

void
RoceSetting(const std::string& key, const std::string& x)
{
    static const std::map<std::string, std::function<void(const std::string&)>> setters = {
        {"roce_mtu", [](const std::string& v) { g_roce.mtu = std::stoul(v); }},
        {"roce_kmin", [](const std::string& v) { g_roce.kmin = std::stod(v); }},
        {"roce_kmax", [](const std::string& v) { g_roce.kmax = std::stod(v); }},
        {"roce_pmax", [](const std::string& v) { g_roce.pmax = std::stod(v); }},
        {"roce_g", [](const std::string& v) { g_roce.g = std::stod(v); }},
        {"roce_cnp_ns", [](const std::string& v) { g_roce.cnpNs = std::stoll(v); }},
        {"roce_alpha_ns", [](const std::string& v) { g_roce.alphaNs = std::stoll(v); }},
        {"roce_rate_ns", [](const std::string& v) { g_roce.rateNs = std::stoll(v); }},
        {"roce_byte_counter", [](const std::string& v) { g_roce.byteCounter = std::stod(v); }},
        {"roce_fast_recovery", [](const std::string& v) { g_roce.fastRecovery = std::stoul(v); }},
        {"roce_rai", [](const std::string& v) { g_roce.rai = std::stod(v); }},
        {"roce_rhai", [](const std::string& v) { g_roce.rhai = std::stod(v); }},
        {"roce_min_rate", [](const std::string& v) { g_roce.minRate = std::stod(v); }},
        {"roce_ack_every", [](const std::string& v) { g_roce.ackEvery = std::stoul(v); }},
        {"roce_nak_ns", [](const std::string& v) { g_roce.nakNs = std::stoll(v); }},
        {"roce_timeout_ns", [](const std::string& v) { g_roce.timeoutNs = std::stoll(v); }},
        {"roce_xoff", [](const std::string& v) { g_roce.xoff = std::stod(v); }},
        {"roce_xon", [](const std::string& v) { g_roce.xon = std::stod(v); }},
        {"roce_watchdog_ns", [](const std::string& v) { g_roce.watchdogNs = std::stoll(v); }},
        {"roce_restore_ns", [](const std::string& v) { g_roce.restoreNs = std::stoll(v); }},
    };
    auto it = setters.find(key);
    if (it == setters.end())
    {
        Fail("unknown setting " + key);
    }
    it->second(x);
}

} // namespace
