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
//   note T FID SRC DST BYTES CONN TOS   a message nobody answers (the Transfer Engine's
//                                       notice): done at its last byte's arrival
//   tos T FID TOS | pace T FID BPS      re-mark a shard's stream / cap its rate (0: none)
//   abort T FID                         stop a shard; its connection is not reused
//   hostdown T HOST                     the host stops answering (its interfaces go down)
//   linkstate T LINK 0|1                a link fails (drops everything) or returns
//   clear T, then route ...            replace every switch's routes (after a link change)
//   bg T SRC DST BPS [UNTIL_NS]         a paced background stream (0 stops it)
//   counters T                          per directed link: class bytes and drops; live shards
//   sockets                             every Linux socket with data still to deliver, a
//                                       line each ("s state=... "): where a stall stands
//   pfc T                               RoCE: per directed link PFC and ECN counters, the
//                                       watchdog's trips, CNPs, NAKs, timeouts (roce.h)
//   rate FID                            RoCE: a live QP's DCQCN rate (bit/s) and alpha
//   replica                             what was built: each link side's rate and queue
//                                       depth ("q LINK SIDE BPS DEPTH packets|bytes"), the
//                                       TCP timers ("t RTO_MIN DELACK TLP_MIN TSQ_WINDOW" ns)
//   hello                               "kvnet PROTOCOL": this is the program, and its version
//   quit
// While a command is worked on, "beat" lines come every wall second (the driver skips them).
// Answers end with "end"; "run" answers "done FID T RETX TIMEOUTS TIMEOUT_NS SRTT_NS
// MINRTT_NS PATH" per shard finished, then "at T". An error is "error TEXT" and exit 2.

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

using namespace ns3;

#include "common.h"
#include "queue.h"
#include "forwarding.h"
#include "linux_rtt.h"
#include "linux_tcp.h"
#include "streams.h"
#include "roce.h"
#include "background.h"
#include "build.h"

namespace
{

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
    for (const auto& [fid, q] : g_qps)
    {
        auto rx = g_rx.find(fid);
        std::cout << "f " << fid << " " << (rx == g_rx.end() ? 0 : rx->second.received) << "\n";
    }
    uint64_t hosts = 0, hops = 0, marked = 0; // packets on a wire: by hosts, by every node
    uint64_t hostDrops = 0;                    // packets a host's own egress dropped
    for (const auto& l : g_links)
    {
        hops += l.qA->packets + l.qB->packets;
        marked += l.qA->marked + l.qB->marked;
        hosts += (g_nodes[l.a].host ? l.qA->packets : 0) + (g_nodes[l.b].host ? l.qB->packets : 0);
        for (int c = 0; c < 3; ++c)
        {
            hostDrops += (g_nodes[l.a].host ? l.qA->dropped[c] : 0) +
                         (g_nodes[l.b].host ? l.qB->dropped[c] : 0);
        }
    }
    std::cout << "p " << hosts << " " << hops << " " << marked << " " << hostDrops << " "
              << g_probes << " " << g_restarts << " " << g_relost << "\n";
    std::cout << "at " << Simulator::Now().GetNanoSeconds() << "\nend" << std::endl;
}

// What the program built, read back from its objects: every link side's device rate and
// queue depth (a leaf's, in packets or bytes), and a socket's TCP timers as built.
void
Replica()
{
    for (uint32_t id = 0; id < g_links.size(); ++id)
    {
        const Link& l = g_links[id];
        for (int side = 0; side < 2; ++side)
        {
            Ptr<PointToPointNetDevice> dev = side == 0 ? l.devA : l.devB;
            Ptr<ClassQueueDisc> q = side == 0 ? l.qA : l.qB;
            DataRateValue wire;
            dev->GetAttribute("DataRate", wire); // the link's rate in the emulation's frames
            double rate = double(wire.Get().GetBitRate()) / g_set.wire;
            QueueSize size = q->GetInternalQueue(0)->GetMaxSize();
            std::cout << "q " << id << " " << side << " " << uint64_t(std::llround(rate)) << " "
                      << size.GetValue() << " "
                      << (size.GetUnit() == QueueSizeUnit::BYTES ? "bytes" : "packets") << "\n";
        }
    }
    Ptr<Socket> probe = NewSocket(0);
    TimeValue delack, minRto;
    probe->GetAttribute("DelAckTimeout", delack);
    probe->GetAttribute("MinRto", minRto);
    auto lt = DynamicCast<LinuxTcp>(probe);
    int64_t floor = g_set.twin.count("rto") ? g_set.rtoMinNs : minRto.Get().GetNanoSeconds();
    std::cout << "t " << floor << " " << delack.Get().GetNanoSeconds() << " "
              << (lt ? g_set.tlpMinNs : 0) << " " << (lt ? g_set.tsqWindowNs : 0) << "\n";
    probe->Close();
    std::cout << "end" << std::endl;
}

void
Setting(const std::string& key, const std::string& v)
{
    using Set = std::function<void(const std::string&)>;
    static const std::map<std::string, Set> setters = {
        {"transport", [](const std::string& x) { g_set.transport = x; }},
        {"mss", [](const std::string& x) { g_set.mss = std::stoul(x); }},
        {"sndbuf", [](const std::string& x) { g_set.sndbuf = std::stoul(x); }},
        {"rcvbuf", [](const std::string& x) { g_set.rcvbuf = std::stoul(x); }},
        {"rto_min_ns", [](const std::string& x) { g_set.rtoMinNs = std::stoll(x); }},
        {"delack_ns", [](const std::string& x) { g_set.delAckNs = std::stoll(x); }},
        {"init_cwnd", [](const std::string& x) { g_set.initCwnd = std::stoul(x); }},
        {"seed", [](const std::string& x) { g_set.seed = std::stoul(x); }},
        {"ecmp",
         [](const std::string& x) { g_set.ecmp = x == "per-flow" ? Ecmp::PerFlow : Ecmp::PerPair; }},
        {"queue_limit", [](const std::string& x) { g_set.byteLimit = x == "bytes"; }},
        {"frame", [](const std::string& x) { g_set.frameBytes = std::stoul(x); }},
        {"ecn_k", [](const std::string& x) { g_set.ecnK = std::stoul(x); }},
        {"connections", [](const std::string& x) { g_set.persistent = x == "persistent"; }},
        {"lanes", [](const std::string& x) { g_set.lanes = std::stoul(x); }},
        {"levels", [](const std::string& x) { g_kvLevels = std::stoul(x); }},
        {"kv_port", [](const std::string& x) { g_set.kvPort = uint16_t(std::stoul(x)); }},
        {"jitter_ns", [](const std::string& x) { g_set.jitterNs = std::stoll(x); }},
        {"jitter_seed", [](const std::string& x) { g_set.jitterSeed = std::stoull(x); }},
        {"twin",
         [](const std::string& x) {
             g_set.twin.clear();
             std::istringstream in(x);
             for (std::string f; std::getline(in, f, ',');)
             {
                 if (!f.empty() && f != "none")
                 {
                     g_set.twin.insert(f);
                 }
             }
         }},
        {"tlp_min_ns", [](const std::string& x) { g_set.tlpMinNs = std::stoll(x); }},
        {"tsq_window_ns", [](const std::string& x) { g_set.tsqWindowNs = std::stoll(x); }},
        {"wire", [](const std::string& x) { g_set.wire = std::stod(x); }},
    };
    if (key.rfind("roce_", 0) == 0)
    {
        RoceSetting(key, v);
        return;
    }
    auto it = setters.find(key);
    if (it == setters.end())
    {
        Fail("unknown setting " + key);
    }
    it->second(v);
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
        Emit(true);
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
        else if (cmd == "hello")
        {
            std::cout << "kvnet " << PROTOCOL << "\nend" << std::endl;
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
            StartOrDelay(num(2), num(3), num(4), num(5), num(6), uint8_t(num(7)));
        }
        else if (cmd == "note")
        {
            At(num(1));
            StartShard(num(2), num(3), num(4), num(5), num(6), uint8_t(num(7)), 0, true);
        }
        else if (cmd == "tos")
        {
            At(num(1));
            if (auto p = g_pending.find(num(2)); p != g_pending.end())
            {
                p->second.tos = uint8_t(num(3));
            }
            else if (Qp* q = LiveQp(num(2)))
            {
                q->tos = uint8_t(num(3));
                q->sock->SetIpTos(uint8_t(q->tos | kEct0));
            }
            else if (Shard* s = LiveShard(num(2)); s && s->conn->tos != uint8_t(num(3)))
            {
                s->conn->tos = uint8_t(num(3));
                s->conn->tx->SetIpTos(s->conn->tos);
            }
        }
        else if (cmd == "pace")
        {
            At(num(1));
            if (auto p = g_pending.find(num(2)); p != g_pending.end())
            {
                p->second.pace = uint64_t(num(3));
            }
            else if (Qp* q = LiveQp(num(2)))
            {
                q->pace = uint64_t(num(3));
                NicKick(q->src);
            }
            else if (Shard* s = LiveShard(num(2)))
            {
                s->pace = uint64_t(num(3));
                Feed(s->conn);
            }
        }
        else if (cmd == "abort")
        {
            At(num(1));
            if (auto p = g_pending.find(num(2)); p != g_pending.end())
            {
                Simulator::Cancel(p->second.start); // none while it waits for a lane
                g_pending.erase(p);
            }
            else if (Qp* q = LiveQp(num(2)))
            {
                RoceDrop(q);
            }
            else if (Shard* s = LiveShard(num(2)))
            {
                s->aborted = true;
                s->conn->dead = true; // its stream holds bytes nobody will read
                g_shards.erase(s->fid);
                s->conn->tx->Close();
                if (s->conn->lane) // another lane replaces it for the pair's waiting shards
                {
                    NextOnLanes(s->conn->src, s->conn->dst);
                }
            }
        }
        else if (cmd == "hostdown")
        {
            At(num(1));
            uint32_t h = num(2);
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
        else if (cmd == "sockets")
        {
            for (auto* sock : g_linux)
            {
                sock->Describe(std::cout);
            }
            std::cout << "end" << std::endl;
        }
        else if (cmd == "replica")
        {
            Replica();
        }
        else if (cmd == "pfc")
        {
            At(num(1));
            PfcReport();
            std::cout << "at " << Simulator::Now().GetNanoSeconds() << "\nend" << std::endl;
        }
        else if (cmd == "rate")
        {
            Qp* q = LiveQp(num(1));
            std::cout << "rate " << num(1) << " " << (q ? q->rc : 0.0) << " "
                      << (q ? q->alpha : 0.0) << "\nend" << std::endl;
        }
        else if (cmd == "quit")
        {
            break;
        }
        else
        {
            Fail("unknown command " + cmd);
        }
        Emit(false);
    }
}

} // namespace

int
main()
{
    std::ios::sync_with_stdio(false);
    g_stdout = std::cout.rdbuf(&g_answer);
    std::thread(Beat).detach();
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
    Emit(false);
    std::_Exit(0); // the simulation's objects die with the process: one process per run
}
