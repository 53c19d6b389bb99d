// netkv-ns3: building the fabric's stacks, queues and listeners.
#pragma once

namespace
{

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
    g_set.congestion = tcp;
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(g_set.mss));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(g_set.sndbuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(g_set.rcvbuf));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(g_set.initCwnd));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(NanoSeconds(g_set.delAckNs)));
    // Linux's RTO: srtt + max(rto_min, mdev), the floor inside its estimator (linux_tcp.h)
    Config::SetDefault("ns3::TcpSocketBase::MinRto",
                       TimeValue(NanoSeconds(g_set.twin.count("rto") ? 1 : g_set.rtoMinNs)));
    Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(Seconds(1))); // Linux's initial RTO
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(15)); // tcp_retries2
    if (g_set.twin.count("rack"))
    {
        Config::SetDefault("ns3::TcpSocketBase::ReTxThreshold", UintegerValue(1));
    }
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
            if (!g_nodes[id].host && g_nodes[PeerOf(g_links[lid], id)].host)
            {
                g_hostFacing.insert(PeekPointer(dev));
            }
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
            Ptr<Socket> l = NewSocket(id);
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
    if (Roce())
    {
        RoceBuild();
    }
    Simulator::Stop(Seconds(0)); // the objects' initialisation (queues attach to devices)
    Simulator::Run();
}

uint32_t g_kvLevels = 0;

void
AddLink(uint32_t a, uint32_t b, double rateBps, int64_t delayNs, uint32_t limit)
{
    g_p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(std::llround(rateBps * g_set.wire)))));
    g_p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(delayNs)));
    NetDeviceContainer d = g_p2p.Install(g_nodes[a].node, g_nodes[b].node);
    Link l{a, b, rateBps, delayNs};
    l.devA = DynamicCast<PointToPointNetDevice>(d.Get(0));
    l.devB = DynamicCast<PointToPointNetDevice>(d.Get(1));
    l.qA = CreateObject<ClassQueueDisc>();
    l.qB = CreateObject<ClassQueueDisc>();
    l.qA->Configure(rateBps, limit, g_kvLevels, g_nodes[a].host, a);
    l.qB->Configure(rateBps, limit, g_kvLevels, g_nodes[b].host, b);
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
    l.qA->dir = 2 * id;
    l.qB->dir = 2 * id + 1;
    g_inDir[PeekPointer(l.devB)] = 2 * id; // what a sends arrives at b
    g_inDir[PeekPointer(l.devA)] = 2 * id + 1;
    g_links.push_back(l);
    g_nodes[a].links.push_back(id);
    g_nodes[b].links.push_back(id);
}


} // namespace
