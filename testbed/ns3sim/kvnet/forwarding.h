// netkv-ns3: the fabric's nodes and links, and its forwarding (ECMP).
#pragma once

namespace
{

// ---------------------------------------------------------------------------------------
// The fabric's nodes and links, and its forwarding.

struct Link
{
    uint32_t a, b;
    double rateBps = 0; // the link's, as the queues shape it
    int64_t delayNs = 0;
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
std::set<const NetDevice*> g_hostFacing; // switch ports that face a host: a ToR's ingress
// a receiving device -> the directed link that arrives on it (link id x 2 + sending side)
std::unordered_map<const NetDevice*, uint32_t> g_inDir;

// Which directed link a packet came into a switch on: PFC counts an ingress's bytes and
// pauses the egress that sent them (RoCE)
class IngressTag : public Tag
{
  public:
    uint32_t dir = 0;

    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("netkv::IngressTag").SetParent<Tag>().AddConstructor<IngressTag>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override
    {
        return GetTypeId();
    }

    uint32_t GetSerializedSize() const override
    {
        return 4;
    }

    void Serialize(TagBuffer i) const override
    {
        i.WriteU32(dir);
    }

    void Deserialize(TagBuffer i) override
    {
        dir = i.ReadU32();
    }

    void Print(std::ostream& os) const override
    {
        os << "dir=" << dir;
    }
};

// The ToR's DSCP policy at a host's ingress (sdn/rules.py classify_rules): the KV levels a
// sender sets are trusted, KV by its port (either end) is AF41, the class table's code
// points are kept, anything else is best effort.
uint8_t
IngressDscp(uint8_t dscp, uint8_t proto, uint16_t sport, uint16_t dport)
{
    if ((dscp >= 16 && dscp < 24) || dscp == 8)
    {
        return dscp;
    }
    if (proto == 6 && (sport == g_set.kvPort || dport == g_set.kvPort))
    {
        return 34;
    }
    return dscp == 48 || dscp == 34 ? dscp : 0;
}

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
        if (Roce())
        {
            IngressTag tag;
            tag.dir = g_inDir.at(PeekPointer(idev));
            Ptr<Packet> tagged = ConstCast<Packet>(p);
            IngressTag before; // the previous switch's
            tagged->RemovePacketTag(before);
            tagged->AddPacketTag(tag);
        }
        auto route = Create<Ipv4Route>();
        route->SetDestination(dst);
        route->SetSource(header.GetSource());
        route->SetGateway(Ipv4Address("0.0.0.0"));
        route->SetOutputDevice(DeviceOf(g_links[link], m_node));
        if (g_set.twin.count("remark") && g_hostFacing.count(PeekPointer(idev)))
        {
            Ipv4Header marked = header;
            marked.SetDscp(Ipv4Header::DscpType(
                IngressDscp(header.GetTos() >> 2, header.GetProtocol(), sport, dport)));
            ucb(route, p, marked);
            return true;
        }
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
PathOf(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport, uint8_t proto = 6)
{
    std::ostringstream out;
    out << src;
    uint32_t node = PeerOf(g_links[g_nodes[src].links[0]], src);
    out << ">" << node;
    for (size_t hops = 0; node != dst && hops < 64; ++hops)
    {
        uint32_t link = ChooseLink(node, dst, g_nodes[src].ip, g_nodes[dst].ip, sport, dport, proto);
        if (link == UINT32_MAX)
        {
            break;
        }
        node = PeerOf(g_links[link], node);
        out << ">" << node;
    }
    return out.str();
}


} // namespace
