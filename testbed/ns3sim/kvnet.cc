// netkv-ns3: the packet side of netkv-testbed's ns-3 engine, one process per run.
//
// Python (testbed/ns3sim/process.py) builds the fabric and drives the run over stdin and
// stdout, one command a line; this program keeps every packet. It holds no decision of its
// own: the routes come from testbed/topologies/routing.py, the flows from the control
// plane, the queue sizes and class shares from the scenario. What lives here is what must
// run per packet: ECMP at each switch (a stable hash of the address pair, or of the
// 5-tuple salted per switch), the egress queue discipline (the emulation's HTB tree:
// control, KV and background classes with guaranteed shares, KV priority levels strictly
// ordered inside the KV class, DCTCP's step marking when asked), and the KV byte streams
// on pooled TCP connections, whose last byte's arrival stops the simulator so that control
// returns to Python at that instant.
//
// Protocol (times in integer nanoseconds, node and link ids in the order they were made):
//   set KEY VALUE                       before `ready`: transport and socket settings
//   host IP | switch SALT               a node
//   link A B RATE_BPS DELAY_NS QUEUE    a full-duplex link, QUEUE packets (or bytes) a class
//   route SW DST LINK...                at switch SW, packets to host DST leave on one of LINKs
//   ready                               build the stacks and queues; answers "ok"
//   run T                               simulate up to T or the first KV completion before it
//   flow T FID SRC DST BYTES SHARD TOS  a shard of BYTES from SRC to DST on a pooled connection
//   tos T FID TOS | pace T FID BPS      re-mark a shard's stream / cap its rate (0: none)
//   abort T FID                         stop a shard; its connection is not reused
//   hostdown T HOST                     the host stops answering (its interfaces go down)
//   linkstate T LINK 0|1                a link fails (drops everything) or returns
//   clear T, then route ...            replace every switch's routes (after a link change)
//   bg T SRC DST BPS [UNTIL_NS]         a paced background stream (0 stops it)
//   counters T                          per directed link: class bytes and drops; live shards
//   quit
// Answers end with "end"; "run" answers "done FID T RETX TIMEOUTS TIMEOUT_NS SRTT_NS
// MINRTT_NS PATH" per shard finished, then "at T". An error is "error TEXT" and exit 2.

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

using namespace ns3;

namespace
{

[[noreturn]] void
Fail(const std::string& why)
{
    std::cout << "error " << why << "\nend" << std::endl;
    std::exit(2);
}

// zlib's CRC-32, as Python's zlib.crc32: the per-pair hash of routing.pair_port
uint32_t
Crc32(const std::string& s)
{
    static std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i)
        {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k)
            {
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            }
            t[i] = c;
        }
        return t;
    }();
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char ch : s)
    {
        c = table[(c ^ ch) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

uint64_t
Mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

enum class Ecmp
{
    PerPair,
    PerFlow
};

struct Settings
{
    std::string transport = "cubic";
    uint32_t mss = 1448;
    uint32_t sndbuf = 131072;
    uint32_t rcvbuf = 131072;
    int64_t rtoMinNs = 200000000;
    int64_t delAckNs = 40000000;
    uint32_t initCwnd = 10;
    uint32_t seed = 1;
    Ecmp ecmp = Ecmp::PerPair;
    bool byteLimit = false;
    uint32_t frameBytes = 1514;
    uint32_t ecnK = 0; // packets in the KV class that mark CE (DCTCP); 0: no marking
    bool persistent = true;
    uint16_t kvPort = 7000;
};

Settings g_set;

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
    void Configure(double rateBps, uint32_t limit, uint32_t levels, bool host)
    {
        m_rate = rateBps / 8.0;
        m_host = host;
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
        uint32_t size = item->GetSize();
        if (!GetInternalQueue(leaf)->Enqueue(item)) // dropped: the queue disc counts it too
        {
            dropped[cls]++;
            (void)size;
            return false;
        }
        return true;
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

    Ptr<QueueDiscItem> DoDequeue() override
    {
        double now = Simulator::Now().GetSeconds();
        double dt = now - m_last;
        m_last = now;
        for (int c = 0; c < 3; ++c)
        {
            m_tokens[c] = std::min(m_burst[c], m_tokens[c] + m_fill[c] * dt);
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
        m_tokens[pick] -= item->GetSize();
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
    std::array<double, 3> m_fill{}, m_burst{}, m_tokens{};
    double m_last = 0;
};

// ---------------------------------------------------------------------------------------
// The fabric's nodes and links, and its forwarding.

struct Link
{
    uint32_t a, b;
    Ptr<PointToPointNetDevice> devA, devB;
    Ptr<ClassQueueDisc> qA, qB; // egress of a (toward b), of b (toward a)
    Ptr<RateErrorModel> lossA, lossB;
};

struct NodeInfo
{
    bool host = false;
    Ipv4Address ip;
    uint64_t salt = 0;
    Ptr<Node> node;
    std::vector<uint32_t> links; // link ids touching it
};

std::vector<NodeInfo> g_nodes;
std::vector<Link> g_links;
std::unordered_map<uint32_t, uint32_t> g_hostOfIp; // ip -> node id
// switch -> destination host -> the links packets toward it may leave on
std::vector<std::unordered_map<uint32_t, std::vector<uint32_t>>> g_routes;

uint32_t
PeerOf(const Link& l, uint32_t node)
{
    return l.a == node ? l.b : l.a;
}

Ptr<NetDevice>
DeviceOf(const Link& l, uint32_t node)
{
    return l.a == node ? l.devA : l.devB;
}

// The link a switch sends a packet on: routing.pair_port for the address pair, or a hash
// of the 5-tuple salted per switch (OVS select groups hash per flow; real switches salt
// theirs so that a path's hops do not all choose alike).
uint32_t
ChooseLink(uint32_t sw, uint32_t dstHost, Ipv4Address src, Ipv4Address dst, uint16_t sport,
           uint16_t dport, uint8_t proto)
{
    auto it = g_routes[sw].find(dstHost);
    if (it == g_routes[sw].end() || it->second.empty())
    {
        return UINT32_MAX;
    }
    const auto& links = it->second;
    if (links.size() == 1)
    {
        return links[0];
    }
    if (g_set.ecmp == Ecmp::PerPair)
    {
        static std::unordered_map<uint64_t, uint32_t> cache;
        uint64_t key = (uint64_t(src.Get()) << 32) | dst.Get();
        auto c = cache.find(key);
        uint32_t h;
        if (c == cache.end())
        {
            std::ostringstream s;
            src.Print(s);
            s << ">";
            dst.Print(s);
            h = Crc32(s.str());
            cache[key] = h;
        }
        else
        {
            h = c->second;
        }
        return links[h % links.size()];
    }
    uint64_t x = g_nodes[sw].salt;
    x = Mix(x ^ src.Get());
    x = Mix(x ^ dst.Get());
    x = Mix(x ^ ((uint64_t(sport) << 16) | dport) ^ (uint64_t(proto) << 40));
    return links[x % links.size()];
}

class FabricRouting : public Ipv4RoutingProtocol
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("netkv::FabricRouting")
                                .SetParent<Ipv4RoutingProtocol>()
                                .AddConstructor<FabricRouting>();
        return tid;
    }

    uint32_t m_node = 0;

    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p,
                               const Ipv4Header& header,
                               Ptr<NetDevice> oif,
                               Socket::SocketErrno& sockerr) override
    {
        const NodeInfo& me = g_nodes[m_node];
        if (!me.host || me.links.empty())
        {
            sockerr = Socket::ERROR_NOROUTETOHOST;
            return nullptr;
        }
        Ptr<NetDevice> dev = DeviceOf(g_links[me.links[0]], m_node);
        auto route = Create<Ipv4Route>();
        route->SetDestination(header.GetDestination());
        route->SetSource(me.ip);
        route->SetGateway(Ipv4Address("0.0.0.0"));
        route->SetOutputDevice(dev);
        sockerr = Socket::ERROR_NOTERROR;
        return route;
    }

    bool RouteInput(Ptr<const Packet> p,
                    const Ipv4Header& header,
                    Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override
    {
        const NodeInfo& me = g_nodes[m_node];
        Ipv4Address dst = header.GetDestination();
        if (me.host)
        {
            if (dst == me.ip)
            {
                lcb(p, header, m_ipv4->GetInterfaceForDevice(idev));
                return true;
            }
            return false;
        }
        auto host = g_hostOfIp.find(dst.Get());
        if (host == g_hostOfIp.end())
        {
            return false;
        }
        uint16_t sport = 0, dport = 0;
        if (p->GetSize() >= 4)
        {
            uint8_t b[4];
            p->CopyData(b, 4);
            sport = uint16_t(b[0] << 8 | b[1]);
            dport = uint16_t(b[2] << 8 | b[3]);
        }
        uint32_t link = ChooseLink(m_node, host->second, header.GetSource(), dst, sport, dport,
                                   header.GetProtocol());
        if (link == UINT32_MAX)
        {
            return false; // partitioned: no live route (the packet is dropped)
        }
        auto route = Create<Ipv4Route>();
        route->SetDestination(dst);
        route->SetSource(header.GetSource());
        route->SetGateway(Ipv4Address("0.0.0.0"));
        route->SetOutputDevice(DeviceOf(g_links[link], m_node));
        ucb(route, p, header);
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override
    {
    }

    void NotifyInterfaceDown(uint32_t) override
    {
    }

    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void SetIpv4(Ptr<Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override
    {
    }

  private:
    Ptr<Ipv4> m_ipv4;
};

// The nodes a shard's packets cross (as node ids), from its 5-tuple.
std::string
PathOf(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport)
{
    std::ostringstream out;
    out << src;
    uint32_t node = PeerOf(g_links[g_nodes[src].links[0]], src);
    out << ">" << node;
    for (size_t hops = 0; node != dst && hops < 64; ++hops)
    {
        uint32_t link = ChooseLink(node, dst, g_nodes[src].ip, g_nodes[dst].ip, sport, dport, 6);
        if (link == UINT32_MAX)
        {
            break;
        }
        node = PeerOf(g_links[link], node);
        out << ">" << node;
    }
    return out.str();
}

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
    uint64_t retx = 0, timeouts = 0;
    int64_t timeoutNs = 0, lossSince = -1;
    int64_t srttNs = 0, minRttNs = 0;
    uint8_t tos = 0x88;
    EventId paceEvent;
};

std::map<uint32_t, Shard*> g_shards;                  // live shards by flow id
std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<Conn*>> g_idle; // pool
std::map<std::pair<uint32_t, uint16_t>, Conn*> g_bySource; // (src ip, port) -> conn
std::vector<std::string> g_done;                       // completions not yet reported
std::vector<Ptr<Socket>> g_listeners;
std::vector<bool> g_hostDown;

void Feed(Conn* c);

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
    Ptr<Socket> s = Socket::CreateSocket(g_nodes[src].node, TcpSocketFactory::GetTypeId());
    c->tx = s;
    s->Bind();
    Address local;
    s->GetSockName(local);
    c->sport = InetSocketAddress::ConvertFrom(local).GetPort();
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
    if (g_set.persistent && !c->dead && c->sending.empty() && c->receiving.empty())
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
                else
                {
                    Finish(s);
                }
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
    sock->SetIpTos(0x88); // the receiver's ACKs ride the KV class (AF41), as on the fabric
    sock->SetRecvCallback(MakeBoundCallback(&OnReceive, c));
    OnReceive(c, sock);
}

void
StartShard(uint32_t fid, uint32_t src, uint32_t dst, uint64_t bytes, uint32_t index, uint8_t tos)
{
    if (g_hostDown[src] || g_hostDown[dst])
    {
        // a dead end: the shard never arrives (the control plane aborts it)
    }
    Conn* c = nullptr;
    if (g_set.persistent)
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
    st->tx = Socket::CreateSocket(g_nodes[src].node, TcpSocketFactory::GetTypeId());
    st->tx->Bind();
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

// ---------------------------------------------------------------------------------------
// Building the fabric.

PointToPointHelper g_p2p;

void
Build()
{
    std::string tcp = g_set.transport == "dctcp"    ? "ns3::TcpDctcp"
                      : g_set.transport == "newreno" ? "ns3::TcpLinuxReno"
                      : g_set.transport == "bbr"     ? "ns3::TcpBbr"
                                                     : "ns3::TcpCubic";
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(tcp));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(g_set.mss));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(g_set.sndbuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(g_set.rcvbuf));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(g_set.initCwnd));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(NanoSeconds(g_set.delAckNs)));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(NanoSeconds(g_set.rtoMinNs)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(1)));
    // ns-3 takes RTT samples from TCP timestamps in whole milliseconds; Linux keeps its own
    // in microseconds. Without the option ns-3 samples each segment's own round trip exactly
    // (the segment keeps the emulation's payload, its headers are 12 bytes shorter).
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
    if (g_set.transport == "dctcp")
    {
        Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
    }
    RngSeedManager::SetSeed(1);
    RngSeedManager::SetRun(g_set.seed);

    InternetStackHelper stack;
    for (uint32_t id = 0; id < g_nodes.size(); ++id)
    {
        stack.Install(g_nodes[id].node);
        Ptr<Ipv4> ipv4 = g_nodes[id].node->GetObject<Ipv4>();
        auto routing = CreateObject<FabricRouting>();
        routing->m_node = id;
        ipv4->SetRoutingProtocol(routing);
    }
    for (uint32_t id = 0; id < g_nodes.size(); ++id)
    {
        Ptr<Ipv4> ipv4 = g_nodes[id].node->GetObject<Ipv4>();
        for (uint32_t lid : g_nodes[id].links)
        {
            Ptr<NetDevice> dev = DeviceOf(g_links[lid], id);
            int32_t ifc = ipv4->AddInterface(dev);
            if (g_nodes[id].host)
            {
                ipv4->AddAddress(ifc, Ipv4InterfaceAddress(g_nodes[id].ip, Ipv4Mask("255.0.0.0")));
            }
            ipv4->SetMetric(ifc, 1);
            ipv4->SetUp(ifc);
        }
    }
    for (auto& l : g_links)
    {
        for (int side = 0; side < 2; ++side)
        {
            Ptr<NetDevice> dev = side == 0 ? l.devA : l.devB;
            Ptr<ClassQueueDisc> q = side == 0 ? l.qA : l.qB;
            Ptr<TrafficControlLayer> tc = dev->GetNode()->GetObject<TrafficControlLayer>();
            tc->SetRootQueueDiscOnDevice(dev, q);
        }
    }
    for (uint32_t id = 0; id < g_nodes.size(); ++id)
    {
        if (!g_nodes[id].host)
        {
            continue;
        }
        for (uint16_t port : {g_set.kvPort, uint16_t(g_set.kvPort + 1)})
        {
            Ptr<Socket> l = Socket::CreateSocket(g_nodes[id].node, TcpSocketFactory::GetTypeId());
            l->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
            l->Listen();
            if (port == g_set.kvPort)
            {
                l->SetAcceptCallback(MakeCallback(&OnAcceptRequest), MakeCallback(&OnAccept));
            }
            else
            {
                l->SetAcceptCallback(MakeCallback(&OnAcceptRequest),
                                     MakeCallback(+[](Ptr<Socket> s, const Address&) {
                                         s->SetRecvCallback(MakeCallback(&Drain));
                                     }));
            }
            g_listeners.push_back(l);
        }
    }
    g_hostDown.assign(g_nodes.size(), false);
    Simulator::Stop(Seconds(0)); // the objects' initialisation (queues attach to devices)
    Simulator::Run();
}

uint32_t g_kvLevels = 0;

void
AddLink(uint32_t a, uint32_t b, double rateBps, int64_t delayNs, uint32_t limit)
{
    g_p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(rateBps))));
    g_p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(delayNs)));
    NetDeviceContainer d = g_p2p.Install(g_nodes[a].node, g_nodes[b].node);
    Link l{a, b};
    l.devA = DynamicCast<PointToPointNetDevice>(d.Get(0));
    l.devB = DynamicCast<PointToPointNetDevice>(d.Get(1));
    l.qA = CreateObject<ClassQueueDisc>();
    l.qB = CreateObject<ClassQueueDisc>();
    l.qA->Configure(rateBps, limit, g_kvLevels, g_nodes[a].host);
    l.qB->Configure(rateBps, limit, g_kvLevels, g_nodes[b].host);
    for (auto* pair : {&l.lossA, &l.lossB})
    {
        *pair = CreateObject<RateErrorModel>();
        (*pair)->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
        (*pair)->SetRate(1.0);
        (*pair)->Disable();
    }
    l.devA->SetReceiveErrorModel(l.lossA);
    l.devB->SetReceiveErrorModel(l.lossB);
    uint32_t id = g_links.size();
    g_links.push_back(l);
    g_nodes[a].links.push_back(id);
    g_nodes[b].links.push_back(id);
}

// ---------------------------------------------------------------------------------------
// The command loop.

EventId g_stop;

void
RunUntil(int64_t t)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (t > now && g_done.empty())
    {
        g_stop = Simulator::Schedule(NanoSeconds(t - now), [] { Simulator::Stop(); });
        Simulator::Run();
        g_stop.Cancel();
    }
    for (const auto& line : g_done)
    {
        std::cout << line << "\n";
    }
    g_done.clear();
    std::cout << "at " << Simulator::Now().GetNanoSeconds() << "\nend" << std::endl;
}

// A command that changes the network happens at the simulator's clock: Python has run
// it to that instant already; one that says a later time is run up to it first (nothing
// finishes on the way, or Python would have been told).
void
At(int64_t t)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (t > now)
    {
        g_stop = Simulator::Schedule(NanoSeconds(t - now), [] { Simulator::Stop(); });
        Simulator::Run();
        g_stop.Cancel();
        if (Simulator::Now().GetNanoSeconds() != t)
        {
            Fail("a shard finished before a command's time: the driver skipped a run");
        }
    }
}

void
Counters()
{
    for (uint32_t id = 0; id < g_links.size(); ++id)
    {
        const Link& l = g_links[id];
        for (int side = 0; side < 2; ++side)
        {
            Ptr<ClassQueueDisc> q = side == 0 ? l.qA : l.qB;
            std::cout << "c " << id << " " << side;
            for (int c = 0; c < 3; ++c)
            {
                std::cout << " " << q->sent[c];
            }
            for (int c = 0; c < 3; ++c)
            {
                std::cout << " " << q->dropped[c];
            }
            std::cout << "\n";
        }
    }
    for (const auto& [fid, s] : g_shards)
    {
        std::cout << "f " << fid << " " << s->received << "\n";
    }
    uint64_t hosts = 0, hops = 0, marked = 0; // packets on a wire: by hosts, by every node
    for (const auto& l : g_links)
    {
        hops += l.qA->packets + l.qB->packets;
        marked += l.qA->marked + l.qB->marked;
        hosts += (g_nodes[l.a].host ? l.qA->packets : 0) + (g_nodes[l.b].host ? l.qB->packets : 0);
    }
    std::cout << "p " << hosts << " " << hops << " " << marked << "\n";
    std::cout << "at " << Simulator::Now().GetNanoSeconds() << "\nend" << std::endl;
}

void
Setting(const std::string& key, const std::string& value)
{
    if (key == "transport")
    {
        g_set.transport = value;
    }
    else if (key == "mss")
    {
        g_set.mss = std::stoul(value);
    }
    else if (key == "sndbuf")
    {
        g_set.sndbuf = std::stoul(value);
    }
    else if (key == "rcvbuf")
    {
        g_set.rcvbuf = std::stoul(value);
    }
    else if (key == "rto_min_ns")
    {
        g_set.rtoMinNs = std::stoll(value);
    }
    else if (key == "delack_ns")
    {
        g_set.delAckNs = std::stoll(value);
    }
    else if (key == "init_cwnd")
    {
        g_set.initCwnd = std::stoul(value);
    }
    else if (key == "seed")
    {
        g_set.seed = std::stoul(value);
    }
    else if (key == "ecmp")
    {
        g_set.ecmp = value == "per-flow" ? Ecmp::PerFlow : Ecmp::PerPair;
    }
    else if (key == "queue_limit")
    {
        g_set.byteLimit = value == "bytes";
    }
    else if (key == "frame")
    {
        g_set.frameBytes = std::stoul(value);
    }
    else if (key == "ecn_k")
    {
        g_set.ecnK = std::stoul(value);
    }
    else if (key == "connections")
    {
        g_set.persistent = value == "persistent";
    }
    else if (key == "levels")
    {
        g_kvLevels = std::stoul(value);
    }
    else if (key == "kv_port")
    {
        g_set.kvPort = uint16_t(std::stoul(value));
    }
    else
    {
        Fail("unknown setting " + key);
    }
}

Shard*
LiveShard(uint32_t fid)
{
    auto it = g_shards.find(fid);
    return it == g_shards.end() ? nullptr : it->second;
}

void
Loop()
{
    std::string line;
    std::vector<std::string> w;
    bool ready = false;
    while (std::getline(std::cin, line))
    {
        w.clear();
        std::istringstream in(line);
        for (std::string tok; in >> tok;)
        {
            w.push_back(tok);
        }
        if (w.empty())
        {
            continue;
        }
        const std::string& cmd = w[0];
        auto num = [&](size_t i) -> int64_t {
            if (i >= w.size())
            {
                Fail("'" + cmd + "' needs more fields: " + line);
            }
            return std::stoll(w[i]);
        };
        if (cmd == "set")
        {
            Setting(w.at(1), w.at(2));
        }
        else if (cmd == "host" || cmd == "switch")
        {
            NodeInfo n;
            n.host = cmd == "host";
            n.node = CreateObject<Node>();
            if (n.host)
            {
                n.ip = Ipv4Address(w.at(1).c_str());
                g_hostOfIp[n.ip.Get()] = g_nodes.size();
            }
            else
            {
                n.salt = Mix(std::stoull(w.at(1)));
            }
            g_nodes.push_back(n);
            g_routes.emplace_back();
        }
        else if (cmd == "link")
        {
            AddLink(num(1), num(2), std::stod(w.at(3)), num(4), num(5));
        }
        else if (cmd == "route")
        {
            auto& links = g_routes.at(num(1))[num(2)];
            links.clear();
            for (size_t i = 3; i < w.size(); ++i)
            {
                links.push_back(std::stoul(w[i]));
            }
        }
        else if (cmd == "clear")
        {
            At(num(1));
            for (auto& r : g_routes)
            {
                r.clear();
            }
        }
        else if (cmd == "ready")
        {
            Build();
            ready = true;
            std::cout << "ok " << g_nodes.size() << " " << g_links.size() << "\nend" << std::endl;
        }
        else if (!ready)
        {
            Fail("'" + cmd + "' before ready");
        }
        else if (cmd == "run")
        {
            RunUntil(num(1));
        }
        else if (cmd == "flow")
        {
            At(num(1));
            StartShard(num(2), num(3), num(4), num(5), num(6), uint8_t(num(7)));
        }
        else if (cmd == "tos")
        {
            At(num(1));
            if (Shard* s = LiveShard(num(2)); s && s->conn->tos != uint8_t(num(3)))
            {
                s->conn->tos = uint8_t(num(3));
                s->conn->tx->SetIpTos(s->conn->tos);
            }
        }
        else if (cmd == "pace")
        {
            At(num(1));
            if (Shard* s = LiveShard(num(2)))
            {
                s->pace = uint64_t(num(3));
                Feed(s->conn);
            }
        }
        else if (cmd == "abort")
        {
            At(num(1));
            if (Shard* s = LiveShard(num(2)))
            {
                s->aborted = true;
                s->conn->dead = true; // its stream holds bytes nobody will read
                g_shards.erase(s->fid);
                s->conn->tx->Close();
            }
        }
        else if (cmd == "hostdown")
        {
            At(num(1));
            uint32_t h = num(2);
            g_hostDown.at(h) = true;
            Ptr<Ipv4> ipv4 = g_nodes[h].node->GetObject<Ipv4>();
            for (uint32_t i = 1; i < ipv4->GetNInterfaces(); ++i)
            {
                ipv4->SetDown(i);
            }
        }
        else if (cmd == "linkstate")
        {
            At(num(1));
            Link& l = g_links.at(num(2));
            for (auto& em : {l.lossA, l.lossB})
            {
                num(3) ? em->Disable() : em->Enable();
            }
        }
        else if (cmd == "bg")
        {
            At(num(1));
            int64_t until = w.size() > 5 ? num(5) : INT64_MAX;
            SetStream(num(2), num(3), std::stod(w.at(4)), until, w.size() > 5);
        }
        else if (cmd == "counters")
        {
            At(num(1));
            Counters();
        }
        else if (cmd == "quit")
        {
            break;
        }
        else
        {
            Fail("unknown command " + cmd);
        }
    }
}

} // namespace

int
main()
{
    std::ios::sync_with_stdio(false);
    // a device holds one packet: every queue is the class queue disc above it
    g_p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
    try
    {
        Loop();
    }
    catch (const std::exception& e)
    {
        Fail(std::string("bad command: ") + e.what());
    }
    std::cout.flush();
    std::_Exit(0); // the simulation's objects die with the process: one process per run
}
