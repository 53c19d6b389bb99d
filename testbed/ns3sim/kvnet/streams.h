// netkv-ns3: KV shards on pooled TCP connections.
#pragma once

namespace
{

// ---------------------------------------------------------------------------------------
// KV shards on pooled connections.

struct Conn;

struct Shard
{
    uint32_t fid;
    uint64_t bytes;
    uint64_t sent = 0;
    uint64_t received = 0;
    Conn* conn = nullptr;
    bool aborted = false;
    uint64_t retx0 = 0, timeouts0 = 0;
    int64_t timeoutNs0 = 0;
    uint64_t pace = 0;   // bytes/s cap (0: none)
    double paceNext = 0; // ns: when the next segment may be written
    bool arrival = false; // a message nobody answers: done at its last byte's arrival
};

struct Conn
{
    uint32_t src, dst, index;
    Ptr<Socket> tx, rx;
    uint16_t sport = 0;
    bool connected = false;
    bool dead = false;
    std::deque<Shard*> sending;   // sender side: shards whose bytes are still to write
    std::deque<Shard*> receiving; // receiver side: shards in the stream's order
    std::deque<Shard*> replying;  // received whole, the receiver's reply not yet back
    uint64_t retx = 0, timeouts = 0;
    int64_t timeoutNs = 0, lossSince = -1;
    int64_t srttNs = 0, minRttNs = 0;
    uint8_t tos = 0x88;
    EventId paceEvent;
    bool lane = false; // one of its pair's lanes (Settings::lanes)
};

std::map<uint32_t, Shard*> g_shards;                  // live shards by flow id
std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<Conn*>> g_idle; // pool
std::map<std::pair<uint32_t, uint16_t>, Conn*> g_bySource; // (src ip, port) -> conn
std::vector<std::string> g_done;                       // completions not yet reported
std::vector<Ptr<Socket>> g_listeners;

void Feed(Conn* c);
Conn* IdleLane(uint32_t src, uint32_t dst);
void WaitForLane(uint32_t fid, uint32_t src, uint32_t dst, uint64_t bytes, uint32_t index,
                 uint8_t tos, uint64_t pace);
void NextOnLanes(uint32_t src, uint32_t dst);
void LaneFreed(Conn* c);
void OnReply(Conn* c, Ptr<Socket> sock);
void RoceStart(uint32_t fid, uint32_t src, uint32_t dst, uint64_t bytes, uint8_t tos,
               uint64_t pace); // roce.h: the shard as an RDMA write

void
SchedulePace(Conn* c, double atNs)
{
    if (!c->paceEvent.IsPending())
    {
        int64_t wait = std::max<int64_t>(1, int64_t(std::ceil(atNs)) - Simulator::Now().GetNanoSeconds());
        c->paceEvent = Simulator::Schedule(NanoSeconds(wait), [c] { Feed(c); });
    }
}

void
Feed(Conn* c)
{
    if (!c->connected || c->dead)
    {
        return;
    }
    while (!c->sending.empty())
    {
        Shard* s = c->sending.front();
        if (s->aborted)
        {
            c->sending.pop_front();
            continue;
        }
        uint64_t left = s->bytes - s->sent;
        if (left == 0)
        {
            c->sending.pop_front();
            continue;
        }
        uint32_t room = c->tx->GetTxAvailable();
        if (room == 0)
        {
            return; // the send callback feeds again
        }
        if (s->sent == 0) // a new shard's first write: Linux restarts an idle window
        {
            if (auto lt = DynamicCast<LinuxTcp>(c->tx))
            {
                lt->RestartIfIdle();
            }
        }
        uint64_t n = std::min<uint64_t>({left, room, 1u << 16});
        if (s->pace > 0) // Karuna's minimum rate: the sender writes no faster than it
        {
            double now = double(Simulator::Now().GetNanoSeconds());
            if (s->paceNext > now)
            {
                SchedulePace(c, s->paceNext);
                return;
            }
            n = std::min<uint64_t>(n, g_set.mss);
            s->paceNext = std::max(s->paceNext, now) + double(n) / s->pace * 1e9;
        }
        int put = c->tx->Send(Create<Packet>(uint32_t(n)));
        if (put <= 0)
        {
            return;
        }
        s->sent += uint64_t(put);
    }
}

void
OnSendSpace(Conn* c, Ptr<Socket>, uint32_t)
{
    Feed(c);
}

void
OnConnected(Conn* c, Ptr<Socket>)
{
    c->connected = true;
    Feed(c);
    if (c->lane) // the pair's next lane may open now
    {
        NextOnLanes(c->src, c->dst);
    }
}

void
OnRefused(Conn* c, Ptr<Socket>)
{
    c->dead = true;
}

// one trace sink set per connection, bound to it
struct Traces
{
    static void Retx(Conn* c, Ptr<const Packet>, const TcpHeader&, const Address&,
                     const Address&, Ptr<const TcpSocketBase>)
    {
        c->retx++;
    }

    static void Cong(Conn* c, TcpSocketState::TcpCongState_t from, TcpSocketState::TcpCongState_t to)
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        if (to == TcpSocketState::CA_LOSS && from != TcpSocketState::CA_LOSS)
        {
            c->timeouts++;
            c->lossSince = now;
        }
        else if (from == TcpSocketState::CA_LOSS && to != TcpSocketState::CA_LOSS &&
                 c->lossSince >= 0)
        {
            c->timeoutNs += now - c->lossSince;
            c->lossSince = -1;
        }
    }

    static void Srtt(Conn* c, Time, Time now)
    {
        c->srttNs = now.GetNanoSeconds();
    }

    static void LastRtt(Conn* c, Time, Time rtt)
    {
        int64_t ns = rtt.GetNanoSeconds();
        if (ns > 0 && (c->minRttNs == 0 || ns < c->minRttNs))
        {
            c->minRttNs = ns;
        }
    }
};

void
Trace(Ptr<Socket> sock, const char* name, const CallbackBase& cb)
{
    if (!sock->TraceConnectWithoutContext(name, cb))
    {
        Fail(std::string("ns-3 has no TCP trace source ") + name);
    }
}

Conn*
OpenConn(uint32_t src, uint32_t dst, uint32_t index)
{
    auto* c = new Conn{src, dst, index};
    Ptr<Socket> s = NewSocket(src);
    c->tx = s;
    s->Bind();
    Address local;
    s->GetSockName(local);
    c->sport = InetSocketAddress::ConvertFrom(local).GetPort();
    FollowQueue(src, s);
    s->SetRecvCallback(MakeBoundCallback(&OnReply, c));
    g_bySource[{g_nodes[src].ip.Get(), c->sport}] = c;
    Trace(s, "Retransmission", MakeBoundCallback(&Traces::Retx, c));
    Trace(s, "CongState", MakeBoundCallback(&Traces::Cong, c));
    Trace(s, "RTT", MakeBoundCallback(&Traces::Srtt, c));
    Trace(s, "LastRTT", MakeBoundCallback(&Traces::LastRtt, c));
    s->SetConnectCallback(MakeBoundCallback(&OnConnected, c), MakeBoundCallback(&OnRefused, c));
    s->SetSendCallback(MakeBoundCallback(&OnSendSpace, c));
    s->SetIpTos(c->tos);
    s->Connect(InetSocketAddress(g_nodes[dst].ip, g_set.kvPort));
    return c;
}

void
Finish(Shard* s)
{
    Conn* c = s->conn;
    std::ostringstream line;
    line << "done " << s->fid << " " << Simulator::Now().GetNanoSeconds() << " "
         << c->retx - s->retx0 << " " << c->timeouts - s->timeouts0 << " "
         << c->timeoutNs - s->timeoutNs0 << " " << c->srttNs << " " << c->minRttNs << " "
         << PathOf(c->src, c->dst, c->sport, g_set.kvPort);
    g_done.push_back(line.str());
    g_shards.erase(s->fid);
    delete s;
    if (c->lane)
    {
        LaneFreed(c);
    }
    else if (g_set.persistent && !c->dead && c->sending.empty() && c->receiving.empty() &&
             c->replying.empty())
    {
        g_idle[{c->src, c->dst, c->index}].push_back(c);
    }
    else if (!g_set.persistent)
    {
        c->dead = true;
        c->tx->Close();
        if (c->rx)
        {
            c->rx->Close();
        }
    }
    Simulator::Stop(); // control goes back to Python at this instant
}

void
OnReceive(Conn* c, Ptr<Socket> sock)
{
    Ptr<Packet> p;
    while ((p = sock->Recv()))
    {
        uint64_t n = p->GetSize();
        while (n > 0 && !c->receiving.empty())
        {
            Shard* s = c->receiving.front();
            uint64_t take = std::min(n, s->bytes - s->received);
            s->received += take;
            n -= take;
            if (s->received == s->bytes)
            {
                c->receiving.pop_front();
                if (s->aborted)
                {
                    delete s;
                }
                else if (g_set.twin.count("framing") && !s->arrival) // the emulation's
                {                                     // receiver answers a byte; the
                    c->replying.push_back(s);         // sender's read of it ends the shard
                    sock->Send(Create<Packet>(1));
                }
                else
                {
                    Finish(s);
                }
            }
        }
    }
}

// The sender reads the receiver's one-byte replies: each ends the oldest shard waiting
void
OnReply(Conn* c, Ptr<Socket> sock)
{
    Ptr<Packet> p;
    while ((p = sock->Recv()))
    {
        for (uint32_t n = p->GetSize(); n > 0 && !c->replying.empty(); --n)
        {
            Shard* s = c->replying.front();
            c->replying.pop_front();
            if (s->aborted)
            {
                delete s;
            }
            else
            {
                Finish(s);
            }
        }
    }
}

bool
OnAcceptRequest(Ptr<Socket>, const Address&)
{
    return true;
}

void
OnAccept(Ptr<Socket> sock, const Address& from)
{
    auto peer = InetSocketAddress::ConvertFrom(from);
    auto it = g_bySource.find({peer.GetIpv4().Get(), peer.GetPort()});
    if (it == g_bySource.end())
    {
        sock->Close(); // not one of ours: nothing sends it
        return;
    }
    Conn* c = it->second;
    c->rx = sock;
    // the emulation's receiver sets no TOS: its ACKs leave its NIC best effort and the ToR
    // marks them AF41 by port (IngressDscp); without that, they ride the KV class
    sock->SetIpTos(g_set.twin.count("remark") ? 0x00 : 0x88);
    sock->SetRecvCallback(MakeBoundCallback(&OnReceive, c));
    OnReceive(c, sock);
}

void
StartShard(uint32_t fid, uint32_t src, uint32_t dst, uint64_t bytes, uint32_t index, uint8_t tos,
           uint64_t pace = 0, bool arrival = false)
{
    if (Roce())
    {
        RoceStart(fid, src, dst, bytes, tos, pace);
        return;
    }
    Conn* c = nullptr; // to or from a host that is down, it never arrives: the control
                       // plane aborts it when it notices
    if (g_set.lanes > 0 && !arrival)
    {
        c = IdleLane(src, dst);
        if (c == nullptr)
        {
            WaitForLane(fid, src, dst, bytes, index, tos, pace);
            return;
        }
    }
    else if (g_set.persistent)
    {
        auto& idle = g_idle[{src, dst, index}];
        while (!idle.empty() && c == nullptr)
        {
            c = idle.back();
            idle.pop_back();
            if (c->dead)
            {
                c = nullptr;
            }
        }
    }
    if (c == nullptr)
    {
        c = OpenConn(src, dst, index);
    }
    auto* s = new Shard{fid, bytes};
    s->conn = c;
    s->pace = pace;
    s->arrival = arrival;
    s->retx0 = c->retx;
    s->timeouts0 = c->timeouts;
    s->timeoutNs0 = c->timeoutNs;
    g_shards[fid] = s;
    if (tos != c->tos)
    {
        c->tos = tos;
        c->tx->SetIpTos(tos);
    }
    c->sending.push_back(s);
    c->receiving.push_back(s);
    Feed(c);
}


// A shard whose start is delayed (Settings::jitterNs): what StartShard takes, kept until it
// runs, so that a level, a pace or an abort sent in between still reaches it.
struct Pending
{
    EventId start;
    uint32_t src, dst, index;
    uint64_t bytes;
    uint8_t tos;
    uint64_t pace = 0;
};

std::map<uint32_t, Pending> g_pending;

// The Transfer Engine's lanes (Settings::lanes): a pair's shards share that many kept
// connections, opened as needed; a shard that finds none idle waits, first come first
// served, and takes the first lane (in the order they opened) that frees. A lane is busy
// until its shard ends (under twin "framing", the receiver's reply: the engine's status
// frame). A waiting shard is a Pending without a start event, so tos, pace and abort reach it.
struct Lanes
{
    std::vector<Conn*> conns;
    std::deque<uint32_t> waiting; // flow ids
    bool greeted = false;         // the pair's first write ended: the workers send it alone
};

std::map<std::pair<uint32_t, uint32_t>, Lanes> g_lanes;

bool
Idle(const Conn* c)
{
    return c->sending.empty() && c->receiving.empty() && c->replying.empty();
}

// the first idle lane, else a new one while the pair has fewer than Settings::lanes (a
// dead one is replaced, as the engine reconnects a lane), or nullptr. The engine opens
// one lane at a time (the next once it connected), and the workers send a pair's first
// write alone.
Conn*
IdleLane(uint32_t src, uint32_t dst)
{
    Lanes& l = g_lanes[{src, dst}];
    std::erase_if(l.conns, [](const Conn* c) { return c->dead; });
    for (Conn* c : l.conns)
    {
        if (Idle(c))
        {
            return c;
        }
    }
    bool connecting = std::any_of(l.conns.begin(), l.conns.end(),
                                  [](const Conn* c) { return !c->connected; });
    if (l.conns.size() >= g_set.lanes || connecting || (!l.greeted && !l.conns.empty()))
    {
        return nullptr;
    }
    Conn* c = OpenConn(src, dst, uint32_t(l.conns.size()));
    c->lane = true;
    l.conns.push_back(c);
    return c;
}

void
StartPending(uint32_t fid)
{
    auto it = g_pending.find(fid);
    Pending p = it->second;
    g_pending.erase(it);
    StartShard(fid, p.src, p.dst, p.bytes, p.index, p.tos, p.pace);
}

void
WaitForLane(uint32_t fid, uint32_t src, uint32_t dst, uint64_t bytes, uint32_t index, uint8_t tos,
            uint64_t pace)
{
    g_pending[fid] = Pending{EventId(), src, dst, index, bytes, tos, pace};
    g_lanes[{src, dst}].waiting.push_back(fid);
}

// a lane of the pair freed (or died): the waiting shards take what is idle, in order
void
NextOnLanes(uint32_t src, uint32_t dst)
{
    Lanes& l = g_lanes[{src, dst}];
    while (!l.waiting.empty())
    {
        auto p = g_pending.find(l.waiting.front());
        if (p == g_pending.end()) // aborted while it waited
        {
            l.waiting.pop_front();
            continue;
        }
        if (IdleLane(src, dst) == nullptr)
        {
            return;
        }
        l.waiting.pop_front();
        StartPending(p->first);
    }
}

// a lane's shard ended: the pair has met (its first write passed), the next may start
void
LaneFreed(Conn* c)
{
    g_lanes[{c->src, c->dst}].greeted = true;
    NextOnLanes(c->src, c->dst);
}

// StartShard now, or up to jitterNs later: a delay drawn per (jitterSeed, flow id), the
// same in every run with the same settings, so a perturbed run repeats as exactly.
void
StartOrDelay(uint32_t fid, uint32_t src, uint32_t dst, uint64_t bytes, uint32_t index, uint8_t tos)
{
    if (g_set.jitterNs <= 0)
    {
        StartShard(fid, src, dst, bytes, index, tos);
        return;
    }
    uint64_t delay = Mix(g_set.jitterSeed * 0x100000001B3ull + fid) % uint64_t(g_set.jitterNs + 1);
    Pending p{EventId(), src, dst, index, bytes, tos};
    p.start = Simulator::Schedule(NanoSeconds(delay), &StartPending, fid);
    g_pending[fid] = p;
}

} // namespace
