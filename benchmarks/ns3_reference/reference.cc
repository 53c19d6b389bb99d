// A reference built only from ns-3's stock parts, for the ns-3 engine's speed floor
// (benchmarks/bench_ns3_floor.py): point-to-point links, the stock FIFO queue disc,
// ns-3's own TCP (CUBIC) and BulkSend applications carrying the same transfers on the
// same fabric the engine's program (testbed/ns3sim/kvnet) carried them. Routing is ns-3's
// global routing over shortest paths (no ECMP: stock ns-3 has only per-packet random
// ECMP, which would reorder every transfer); the per-packet work is what is measured.
//
// Input (stdin), the engine's own set-up lines and one line per transfer:
//   set mss|sndbuf|rcvbuf|rto_min_ns|delack_ns|init_cwnd VALUE
//   host IP            one per host, in node order
//   switch SALT        one per switch, after the hosts
//   link A B RATE_BPS DELAY_NS QUEUE_PACKETS
//   flow SRC DST BYTES START_NS
// Output (stdout): one line of key=value figures.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <ctime>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

uint64_t g_hostTx = 0;
uint64_t g_hopTx = 0;

void
Sent(bool host, Ptr<const Packet>)
{
    ++(host ? g_hostTx : g_hopTx);
}

struct Flow
{
    uint32_t src, dst;
    uint64_t bytes;
    uint64_t startNs;
};

} // namespace

int
main()
{
    std::clock_t started = std::clock();
    std::map<std::string, uint64_t> set{{"mss", 1448}, {"sndbuf", 131072}, {"rcvbuf", 131072},
                                        {"rto_min_ns", 200000000}, {"delack_ns", 40000000},
                                        {"init_cwnd", 10}};
    uint32_t hosts = 0, switches = 0;
    struct Link
    {
        uint32_t a, b;
        uint64_t rate, delayNs, queue;
    };
    std::vector<Link> links;
    std::vector<Flow> flows;
    std::string line;
    while (std::getline(std::cin, line))
    {
        std::istringstream in(line);
        std::string word;
        in >> word;
        if (word == "set")
        {
            std::string key, value;
            in >> key >> value;
            if (set.count(key))
            {
                set[key] = std::stoull(value);
            }
        }
        else if (word == "host")
        {
            ++hosts;
        }
        else if (word == "switch")
        {
            ++switches;
        }
        else if (word == "link")
        {
            Link l;
            in >> l.a >> l.b >> l.rate >> l.delayNs >> l.queue;
            links.push_back(l);
        }
        else if (word == "flow")
        {
            Flow f;
            in >> f.src >> f.dst >> f.bytes >> f.startNs;
            flows.push_back(f);
        }
    }

    Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue("ns3::TcpCubic"));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(set["mss"]));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(set["sndbuf"]));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(set["rcvbuf"]));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(set["init_cwnd"]));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(NanoSeconds(set["delack_ns"])));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(NanoSeconds(set["rto_min_ns"])));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));

    NodeContainer nodes;
    nodes.Create(hosts + switches);
    InternetStackHelper stack;
    stack.Install(nodes);
    PointToPointHelper p2p;
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
    Ipv4AddressHelper address("10.0.0.0", "255.255.255.252");
    std::vector<Ipv4Address> hostAddress(hosts);
    for (const Link& l : links)
    {
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(l.rate)));
        p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(l.delayNs)));
        NetDeviceContainer devices = p2p.Install(nodes.Get(l.a), nodes.Get(l.b));
        TrafficControlHelper tc;
        tc.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize",
                            QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, l.queue)));
        tc.Install(devices);
        Ipv4InterfaceContainer ifs = address.Assign(devices);
        address.NewNetwork();
        uint32_t ends[2] = {l.a, l.b};
        for (int side = 0; side < 2; ++side)
        {
            if (ends[side] < hosts)
            {
                hostAddress[ends[side]] = ifs.GetAddress(side);
            }
            devices.Get(side)->TraceConnectWithoutContext(
                "PhyTxBegin", MakeBoundCallback(&Sent, ends[side] < hosts));
        }
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    const uint16_t port = 9;
    std::vector<Ptr<PacketSink>> sinks;
    for (uint32_t h = 0; h < hosts; ++h)
    {
        PacketSinkHelper sink("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer app = sink.Install(nodes.Get(h));
        app.Start(Seconds(0));
        sinks.push_back(DynamicCast<PacketSink>(app.Get(0)));
    }
    uint64_t last = 0, bytes = 0;
    for (const Flow& f : flows)
    {
        BulkSendHelper send("ns3::TcpSocketFactory", InetSocketAddress(hostAddress[f.dst], port));
        send.SetAttribute("MaxBytes", UintegerValue(f.bytes));
        send.SetAttribute("SendSize", UintegerValue(set["mss"]));
        ApplicationContainer app = send.Install(nodes.Get(f.src));
        app.Start(NanoSeconds(f.startNs));
        last = std::max(last, f.startNs);
        bytes += f.bytes;
    }
    Simulator::Stop(NanoSeconds(last) + Seconds(300));
    std::clock_t built = std::clock();
    Simulator::Run();
    std::clock_t ran = std::clock();
    uint64_t received = 0;
    for (auto& s : sinks)
    {
        received += s->GetTotalRx();
    }
    std::cout << "hosts_tx=" << g_hostTx << " hops_tx=" << g_hopTx << " flows=" << flows.size()
              << " bytes=" << bytes << " received=" << received
              << " modelled_s=" << Simulator::Now().GetSeconds()
              << " build_cpu_s=" << double(built - started) / CLOCKS_PER_SEC
              << " run_cpu_s=" << double(ran - built) / CLOCKS_PER_SEC << std::endl;
    Simulator::Destroy();
    return 0;
}
