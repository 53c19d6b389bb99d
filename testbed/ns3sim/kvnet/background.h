// netkv-ns3: paced background streams.
#pragma once

namespace
{

// ---------------------------------------------------------------------------------------
// Background: a paced stream in the best-effort class, as the emulation's workers send
// it: 16 KiB writes, the next one due a chunk's time after the last was due.

struct Stream
{
    Ptr<Socket> tx;
    double rate = 0;  // bytes/s
    double next = 0;  // ns: when the next chunk is due
    int64_t untilNs = INT64_MAX;
    EventId event;
    bool connected = false;
};

std::map<std::pair<uint32_t, uint32_t>, std::vector<Stream*>> g_streams;
constexpr uint32_t kChunk = 16 * 1024;

void
Pump(Stream* st)
{
    if (!st->connected || st->rate <= 0)
    {
        return;
    }
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (now >= st->untilNs)
    {
        st->rate = 0;
        return;
    }
    while (st->next <= double(now))
    {
        if (st->tx->GetTxAvailable() < kChunk)
        {
            return; // blocked: the send callback resumes, and it catches up as sendall does
        }
        st->tx->Send(Create<Packet>(kChunk));
        st->next += kChunk / st->rate * 1e9;
    }
    st->event.Cancel(); // whole nanoseconds, at least one: never an event at the same instant
    int64_t wait = std::max<int64_t>(1, int64_t(std::ceil(st->next)) - now);
    st->event = Simulator::Schedule(NanoSeconds(wait), [st] { Pump(st); });
}

void
StreamConnected(Stream* s, Ptr<Socket>)
{
    s->connected = true;
    s->next = double(Simulator::Now().GetNanoSeconds());
    Pump(s);
}

void
StreamSpace(Stream* s, Ptr<Socket>, uint32_t)
{
    if (s->rate > 0 && s->next <= double(Simulator::Now().GetNanoSeconds()))
    {
        Pump(s);
    }
}

void
SetStream(uint32_t src, uint32_t dst, double bps, int64_t untilNs, bool extra)
{
    auto& list = g_streams[{src, dst}];
    if (!extra && !list.empty())
    {
        Stream* st = list.front();
        bool was = st->rate > 0;
        st->rate = bps / 8;
        st->untilNs = untilNs;
        if (!was && st->rate > 0)
        {
            st->next = double(Simulator::Now().GetNanoSeconds());
            Pump(st);
        }
        return;
    }
    if (bps <= 0)
    {
        return;
    }
    auto* st = new Stream;
    st->rate = bps / 8;
    st->untilNs = untilNs;
    st->tx = NewSocket(src);
    st->tx->Bind();
    FollowQueue(src, st->tx);
    st->tx->SetIpTos(0x00);
    st->tx->SetConnectCallback(MakeBoundCallback(&StreamConnected, st),
                               MakeNullCallback<void, Ptr<Socket>>());
    st->tx->SetSendCallback(MakeBoundCallback(&StreamSpace, st));
    st->tx->Connect(InetSocketAddress(g_nodes[dst].ip, g_set.kvPort + 1));
    list.push_back(st);
}

void
Drain(Ptr<Socket> sock)
{
    while (sock->Recv())
    {
    }
}


} // namespace
