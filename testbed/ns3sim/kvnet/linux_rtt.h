// netkv-ns3: Linux's RTT estimator and RTO, for ns-3's TcpSocketBase (linux_tcp.h).
#pragma once

namespace
{

// Linux's RTT estimator (tcp_rtt_estimator). TcpSocketBase sets its RTO to
// est + max(granularity, 4 variation), at least MinRto: with MinRto at zero and this
// estimator's variation max(rto_min, mdev) / 4 it is Linux's srtt + max(rto_min, mdev).
// (Linux also keeps mdev's largest value over a round trip and lets the RTO's share decay
// once per round trip; at the replica's scale rto_min dominates mdev.)
class LinuxRtt : public RttEstimator
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("netkv::LinuxRtt").SetParent<RttEstimator>().AddConstructor<LinuxRtt>();
        return tid;
    }

    LinuxRtt() = default;

    LinuxRtt(const LinuxRtt& o)
        : RttEstimator(o),
          m_srtt(o.m_srtt),
          m_mdev(o.m_mdev)
    {
    }

    TypeId GetInstanceTypeId() const override
    {
        return GetTypeId();
    }

    void Measurement(Time t) override
    {
        double m = t.GetSeconds();
        if (m_nSamples == 0)
        {
            m_srtt = m;
            m_mdev = 2 * m; // rto = 3 rtt, as Linux starts
        }
        else
        {
            double err = m - m_srtt;
            m_srtt += err / 8;
            if (err < 0) // a falling RTT barely moves mdev
            {
                err = -err - m_mdev / 4;
                if (err > 0)
                {
                    err /= 8;
                }
            }
            else
            {
                err -= m_mdev / 4;
            }
            m_mdev += err;
        }
        m_nSamples++;
        m_estimatedRtt = Seconds(m_srtt);
        m_estimatedVariation = Seconds(std::max(double(g_set.rtoMinNs) * 1e-9, m_mdev) / 4);
    }

    Ptr<RttEstimator> Copy() const override
    {
        return CopyObject<LinuxRtt>(this);
    }

    void Reset() override
    {
        RttEstimator::Reset();
        m_srtt = m_mdev = 0;
    }

  private:
    double m_srtt = 0, m_mdev = 0; // seconds
};

} // namespace
