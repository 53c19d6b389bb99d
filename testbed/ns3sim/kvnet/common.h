// netkv-ns3: what every part shares (settings, errors, hashes).
#pragma once

namespace
{


// What `hello` answers: the driver checks it before a run starts (a program that is not
// this one, or another version of it, is refused by name).
constexpr int PROTOCOL = 1;

// Answers are gathered in g_answer (std::cout writes there) and written whole by Emit;
// while a command is being worked on a thread writes "beat" every second, so the driver
// can tell a long simulation from a program that stopped answering.
std::stringbuf g_answer;
std::streambuf* g_stdout = nullptr;
std::mutex g_outLock;
bool g_busy = false;

void
Emit(bool busy)
{
    std::lock_guard<std::mutex> hold(g_outLock);
    std::string text = g_answer.str();
    if (!text.empty())
    {
        g_stdout->sputn(text.data(), std::streamsize(text.size()));
        g_answer.str("");
    }
    g_stdout->pubsync();
    g_busy = busy;
}

void
Beat()
{
    for (;;)
    {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        std::lock_guard<std::mutex> hold(g_outLock);
        if (g_busy)
        {
            g_stdout->sputn("beat\n", 5);
            g_stdout->pubsync();
        }
    }
}

[[noreturn]] void
Fail(const std::string& why)
{
    std::cout << "error " << why << "\nend" << std::endl;
    Emit(false);
    std::_Exit(2);
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
    uint32_t lanes = 0;      // a pair's shards share this many connections (0: one per index)
    uint16_t kvPort = 7000;
    int64_t jitterNs = 0;    // a shard's stream starts up to this late (uniform; 0: at once)
    uint64_t jitterSeed = 0; // which draw of those delays
    // the emulation's kernel and workers, modelled (linux_tcp.h, streams.h, forwarding.h):
    // tsq, restart, rto, tlp, rack; framing (a header before a shard, the receiver's
    // one-byte reply ends it); remark (receivers' ACKs best effort until the ToR marks them)
    std::set<std::string> twin{"tsq", "restart", "rto", "tlp", "rack", "framing", "remark"};
    int64_t tlpMinNs = 8000000;  // the probe's floor with several segments out (2 jiffies)
    int64_t tsqWindowNs = 976563; // TSQ lets a socket queue this much of its pacing rate
    std::string congestion = "ns3::TcpCubic";
    // The devices' rate over the link's: above 1 (twin "htb") the queues shape and the
    // devices only carry; below 1 (twin "frames") a segment, shorter here than the
    // emulation's Ethernet frame, takes that frame's time on the wire.
    double wire = 1;
};

Settings g_set;

// RoCE (transport "roce", roce.h): rates and the byte counter already at the replica's
// scale, times in modelled ns, thresholds in bytes (testbed/ns3sim/roce_params.py says why)
struct RoceSettings
{
    uint32_t mtu = 1000;              // payload bytes per packet
    double kmin = 5e3, kmax = 200e3;  // RED marking of the KV class, egress bytes
    double pmax = 0.01;
    double g = 1.0 / 256;
    int64_t cnpNs = 50000;            // a receiver's CNPs for one flow at most this often
    int64_t alphaNs = 55000;          // alpha decays after this long without a CNP
    int64_t rateNs = 55000;           // the rate-increase timer
    double byteCounter = 10e6;        // bytes sent between rate-increase events
    uint32_t fastRecovery = 5;        // F
    double rai = 40e6, rhai = 200e6;  // additive and hyper increase, bit/s
    double minRate = 100e6;           // bit/s
    uint32_t ackEvery = 1;            // the receiver ACKs every this many packets
    int64_t nakNs = 500000;           // a NAK for one expected PSN at most this often
    int64_t timeoutNs = 67108864;     // go-back-N's retransmission timeout (4.096 us x 2^14)
    double xoff = 256e3;              // PFC: KV bytes of one ingress that pause its sender
    double xon = 253e3;               // ... and resume it
    int64_t watchdogNs = 200000000;   // a queue paused this long without release trips
    int64_t restoreNs = 200000000;    // ... and ignores pauses this long after
};

RoceSettings g_roce;

bool
Roce()
{
    return g_set.transport == "roce";
}


} // namespace
