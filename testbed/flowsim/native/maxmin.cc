// Max-min sharing of the fluid network on integer-indexed columns: the same steps as
// testbed/flowsim/sharing.py and fill.py (the Python reference), which name the why of
// each. Python keeps every flow's lifecycle; this keeps, per flow, what re-sharing reads,
// and per link its KV rate and byte counters (integrated up to each change, as
// links.LinkState.settle does), and reports after each re-sharing the flows whose rates
// changed.
//
// Sums run in another order than Python's sets iterate, so rates may differ from the
// reference by a few ulps; the allocation is the same (max-min is unique).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr double SATURATED = 1 - 1e-9;
constexpr double INF = std::numeric_limits<double>::infinity();

struct Flow {
    std::vector<int> links;
    std::vector<int> pos;  // its index in each of its links' flow lists
    double weight = 1.0, cap = INF, rate = 0.0;
    int bottleneck = -1, level = 0;
    long long fid = -1;
};

struct Link {
    double cap = 0.0, full = 0.0, rate = 0.0, umax = 0.0;
    double bg_rate = 0.0, kv_bytes = 0.0, bg_bytes = 0.0, t0 = 0.0;  // byte counters
    bool umax_ok = false;
    std::vector<int> flows;  // slots
};

template <class T>
struct MinHeap {
    std::vector<T> v;
    void clear() { v.clear(); }
    bool empty() const { return v.empty(); }
    const T& top() const { return v.front(); }
    void push(T x) { v.push_back(x); std::push_heap(v.begin(), v.end(), std::greater<T>()); }
    void pop() { std::pop_heap(v.begin(), v.end(), std::greater<T>()); v.pop_back(); }
    void replace(T x) { pop(); push(x); }
    void heapify() { std::make_heap(v.begin(), v.end(), std::greater<T>()); }
};

// a per-index mark that is cleared in O(1) by moving to the next epoch
struct Marks {
    std::vector<uint32_t> m;
    uint32_t epoch = 1;
    void grow(size_t n) { if (m.size() < n) m.resize(n, 0); }
    void next() {
        if (++epoch == 0) { std::fill(m.begin(), m.end(), 0); epoch = 1; }
    }
    bool has(int i) const { return m[i] == epoch; }
    bool add(int i) { if (m[i] == epoch) return false; m[i] = epoch; return true; }
    void drop(int i) { m[i] = 0; }
};

struct Core {
    std::vector<Link> links;
    std::vector<Flow> flows;
    std::vector<int> free_slots;
    std::unordered_map<long long, int> slot;
    long alive = 0;
    double now = 0.0;  // the time of the re-sharing under way

    // one fill's scratch (links: shared with two or more unfrozen flows, their count,
    // weights, residuals; a lone link's one flow)
    Marks seen, active_m, alone_m, unfrozen;
    std::vector<int> live;
    std::vector<double> weights, res, keep_res;
    std::vector<std::vector<int>> members;
    std::vector<int> alone_of;
    MinHeap<std::pair<double, int>> heap;
    MinHeap<std::pair<double, long long>> caps;
    long n_unfrozen = 0;

    // what one re-sharing changed
    Marks flow_touched, link_touched;
    std::vector<double> flow_old;
    std::vector<int> flow_list;
    std::vector<long long> out_fid;
    std::vector<double> out_rate;

    // incremental re-sharing's sets
    Marks ever_sat, in_refill, in_check, in_unfit, moved_m, comp_m;

    explicit Core(int n) : links(n) {
        for (Marks* m : {&seen, &active_m, &alone_m, &link_touched, &ever_sat, &moved_m,
                         &comp_m}) m->grow(n);
        live.resize(n); weights.resize(n); res.resize(n); keep_res.resize(n);
        members.resize(n); alone_of.resize(n);
    }

    int new_slot() {
        int s;
        if (!free_slots.empty()) { s = free_slots.back(); free_slots.pop_back(); }
        else {
            s = static_cast<int>(flows.size());
            flows.emplace_back();
            size_t n = flows.size();
            for (Marks* m : {&unfrozen, &flow_touched, &in_refill, &in_check, &in_unfit})
                m->grow(n);
            flow_old.resize(n);
        }
        flows[s] = Flow();
        return s;
    }

    void unlink(int s) {
        Flow& f = flows[s];
        for (size_t k = 0; k < f.links.size(); ++k) {
            std::vector<int>& on = links[f.links[k]].flows;
            int at = f.pos[k];
            int last = on.back();
            on[at] = last;
            on.pop_back();
            if (last != s) {  // the moved flow's position on this link
                Flow& g = flows[last];
                for (size_t j = 0; j < g.links.size(); ++j)
                    if (g.links[j] == f.links[k] && g.pos[j] == static_cast<int>(on.size())) {
                        g.pos[j] = at;
                        break;
                    }
            }
        }
        f.links.clear();
        f.pos.clear();
    }

    void set_links(long long fid, const int* hs, int n) {
        auto it = slot.find(fid);
        int s;
        if (it == slot.end()) {
            s = new_slot();
            flows[s].fid = fid;
            slot[fid] = s;
            ++alive;
        } else {
            s = it->second;
            unlink(s);
        }
        Flow& f = flows[s];
        f.bottleneck = -1;
        for (int k = 0; k < n; ++k) {
            f.links.push_back(hs[k]);
            f.pos.push_back(static_cast<int>(links[hs[k]].flows.size()));
            links[hs[k]].flows.push_back(s);
        }
    }

    void remove(int s) {
        unlink(s);
        slot.erase(flows[s].fid);
        flows[s].fid = -1;
        free_slots.push_back(s);
        --alive;
    }

    // -- change tracking -------------------------------------------------------------
    void settle(int h) {  // links.LinkState.settle
        Link& l = links[h];
        double dt = now - l.t0;
        if (dt > 0) {
            if (l.rate != 0.0) l.kv_bytes += l.rate * dt;
            if (l.bg_rate != 0.0) l.bg_bytes += l.bg_rate * dt;
            l.t0 = now;
        }
    }
    void touch_link(int h) {  // before its rate changes
        if (link_touched.add(h)) settle(h);
    }
    void set_rate(int s, double rate) {
        if (flow_touched.add(s)) { flow_old[s] = flows[s].rate; flow_list.push_back(s); }
        flows[s].rate = rate;
    }
    void begin(double t) {
        now = t;
        flow_touched.next(); link_touched.next();
        flow_list.clear();
    }
    void finish() {
        out_fid.clear(); out_rate.clear();
        for (int s : flow_list)
            if (flows[s].fid >= 0 && flows[s].rate != flow_old[s]) {
                out_fid.push_back(flows[s].fid);
                out_rate.push_back(flows[s].rate);
            }
    }

    bool saturated(int h) const { return links[h].rate >= links[h].full; }

    // -- progressive filling (fill.py) -----------------------------------------------
    bool is_active(int h) const { return active_m.has(h); }

    void freeze(int s, double rate, bool keep, std::vector<double>& r) {
        Flow& f = flows[s];
        set_rate(s, rate);
        unfrozen.drop(s);
        --n_unfrozen;
        for (int h : f.links) {
            touch_link(h);
            links[h].rate += rate;
            if (is_active(h)) {
                if (--live[h] > 0) {
                    r[h] -= rate;
                    double left = weights[h] - f.weight;
                    if (left <= f.weight * 1e-9) {  // cancelled: weights orders apart
                        left = 0.0;
                        for (int g : members[h])
                            if (unfrozen.has(g)) left += flows[g].weight;
                    }
                    weights[h] = left;
                    continue;
                }
                active_m.drop(h);
            }
            if (keep) r[h] -= rate;
        }
    }

    void fill_one(int s, bool keep) {
        Flow& f = flows[s];
        double w = f.weight, unit = INF;
        for (int h : f.links) {
            double u = keep ? keep_res[h] / w : (links[h].cap - links[h].rate) / w;
            if (u < unit) unit = u;
        }
        unit = std::max(unit, 0.0);
        double rate = (f.cap != INF && f.cap / w < unit) ? f.cap : unit * w;
        active_m.next();  // no link is shared: freeze only adds to the links
        freeze(s, rate, keep, keep_res);
    }

    void fill(const std::vector<int>& set, bool keep) {
        if (set.empty()) return;
        unfrozen.next();
        for (int s : set) unfrozen.add(s);
        n_unfrozen = static_cast<long>(set.size());
        if (set.size() == 1) { fill_one(set[0], keep); return; }
        std::vector<double>& r = keep ? keep_res : res;
        // the links two or more of them cross, with their weights; capped flows' heap
        seen.next(); active_m.next(); alone_m.next();
        std::vector<int> order;
        caps.clear();
        for (int s : set) {
            Flow& f = flows[s];
            for (int h : f.links) {
                if (seen.add(h)) {
                    live[h] = 1; weights[h] = f.weight;
                    members[h].clear(); members[h].push_back(s);
                    order.push_back(h);
                } else {
                    ++live[h]; weights[h] += f.weight; members[h].push_back(s);
                }
            }
            if (f.cap != INF) caps.v.emplace_back(f.cap / f.weight, f.fid);
        }
        caps.heapify();
        heap.clear();
        for (int h : order)
            if (live[h] >= 2) {
                active_m.add(h);
                if (!keep) r[h] = links[h].cap - links[h].rate;
                heap.v.emplace_back(r[h] / weights[h], h);
            }
        for (int s : set) {  // each flow's tightest lone link
            Flow& f = flows[s];
            std::pair<double, int> best(INF, -1);
            for (int h : f.links)
                if (!is_active(h)) {
                    double v = keep ? keep_res[h] / f.weight
                                    : (links[h].cap - links[h].rate) / f.weight;
                    std::pair<double, int> e(v, h);
                    if (best.second < 0 || e < best) best = e;
                }
            if (best.second >= 0) {
                heap.v.push_back(best);
                alone_m.add(best.second);
                alone_of[best.second] = s;
            }
        }
        heap.heapify();
        std::vector<int> frozen_now;
        while (n_unfrozen > 0) {
            auto [ratio, h] = heap.top();
            int lone = -1;
            if (!is_active(h)) {
                if (!alone_m.has(h) || !unfrozen.has(alone_of[h])) { heap.pop(); continue; }
                lone = alone_of[h];
            } else {
                double current = r[h] / weights[h];
                if (current != ratio) { heap.replace({current, h}); continue; }
            }
            double unit = std::max(ratio, 0.0);
            while (!caps.empty() && !unfrozen.has(slot.at(caps.top().second))) caps.pop();
            if (!caps.empty() && caps.top().first < unit) {
                int s = slot.at(caps.top().second);
                caps.pop();
                freeze(s, flows[s].cap, keep, r);
                continue;
            }
            if (lone >= 0) {
                flows[lone].bottleneck = h;
                freeze(lone, unit * flows[lone].weight, keep, r);
                continue;
            }
            frozen_now.clear();
            for (int g : members[h]) if (unfrozen.has(g)) frozen_now.push_back(g);
            for (int g : frozen_now) {
                flows[g].bottleneck = h;
                freeze(g, unit * flows[g].weight, keep, r);
            }
        }
    }

    // -- incremental re-sharing (sharing.py) -----------------------------------------
    double largest_share(int h) {
        Link& l = links[h];
        if (!l.umax_ok) {
            double got = 0.0;
            for (int g : l.flows) {
                double share = flows[g].rate / flows[g].weight;
                if (share > got) got = share;
            }
            l.umax = got;
            l.umax_ok = true;
        }
        return l.umax;
    }

    bool fit(int s) {
        Flow& f = flows[s];
        if (f.cap != INF) {
            if (f.rate > f.cap / SATURATED) return false;
            if (f.rate >= f.cap * SATURATED) return true;
        }
        double share = f.rate / f.weight;
        auto held = [&](int h) {
            if (saturated(h) && share >= largest_share(h) * SATURATED) {
                f.bottleneck = h;
                return true;
            }
            return false;
        };
        if (f.bottleneck >= 0 && held(f.bottleneck)) return true;
        for (int h : f.links) if (held(h)) return true;
        return false;
    }

    std::vector<int> refill_op(const std::vector<int>& refill) {
        std::vector<double> before;
        seen.next();
        for (int s : refill) {
            Flow& f = flows[s];
            before.push_back(f.rate);
            for (int h : f.links) {
                if (seen.add(h) && saturated(h)) ever_sat.add(h);
                touch_link(h);
                links[h].rate -= f.rate;
            }
        }
        fill(refill, false);
        std::vector<int> moved;
        moved_m.next();
        for (size_t i = 0; i < refill.size(); ++i) {
            Flow& f = flows[refill[i]];
            if (f.rate == before[i]) continue;
            for (int h : f.links) if (moved_m.add(h)) moved.push_back(h);
        }
        for (int h : moved) {
            links[h].umax_ok = false;
            if (saturated(h)) ever_sat.add(h);
        }
        return moved;
    }

    bool reshare(const std::vector<int>& touched, const std::vector<int>& gone, bool has_changed,
                 const std::vector<int>& changed, long max_flows, double max_share) {
        ever_sat.next();
        for (int h : touched) if (saturated(h)) ever_sat.add(h);
        for (int s : gone)
            for (int h : flows[s].links) { touch_link(h); links[h].rate -= flows[s].rate; }
        for (int s : gone) remove(s);
        std::vector<int> check;
        in_check.next();
        if (has_changed && gone.empty()) {
            for (int s : changed) if (in_check.add(s)) check.push_back(s);
        } else {
            bool only_full = !gone.empty() && !has_changed;
            for (int h : touched) {
                if (only_full && !ever_sat.has(h)) continue;
                for (int s : links[h].flows) if (in_check.add(s)) check.push_back(s);
            }
        }
        std::vector<int> refill, unfit;
        in_refill.next();
        in_unfit.next();
        double bound = std::max(static_cast<double>(max_flows), alive * max_share);
        while (true) {
            for (int s : check)
                if (!in_refill.has(s) && !in_unfit.has(s) && !fit(s)) {
                    in_unfit.add(s);
                    unfit.push_back(s);
                }
            if (unfit.empty()) return true;
            for (int s : unfit) if (in_refill.add(s)) refill.push_back(s);
            if (static_cast<double>(refill.size()) > bound) return false;
            std::vector<int> moved = refill_op(refill);
            check.clear();
            in_check.next();
            for (int h : moved)
                if (ever_sat.has(h) || saturated(h))
                    for (int s : links[h].flows)
                        if (!in_refill.has(s) && in_check.add(s)) check.push_back(s);
            unfit.clear();
            in_unfit.next();
            for (int s : refill) {
                if (fit(s)) continue;  // else held back on a saturated link by larger shares
                Flow& f = flows[s];
                double share = f.rate / f.weight;
                for (int h : f.links)
                    if (saturated(h))
                        for (int g : links[h].flows)
                            if (!in_refill.has(g) && flows[g].rate / flows[g].weight > share
                                && in_unfit.add(g))
                                unfit.push_back(g);
            }
        }
    }

    // -- whole components ------------------------------------------------------------
    void component(const std::vector<int>& touched, std::vector<int>& ls, std::vector<int>& fs) {
        comp_m.next();
        in_check.next();
        for (int h : touched) if (comp_m.add(h)) ls.push_back(h);
        std::vector<int> stack(ls);
        while (!stack.empty()) {
            int h = stack.back();
            stack.pop_back();
            for (int s : links[h].flows)
                if (in_check.add(s)) {
                    fs.push_back(s);
                    for (int g : flows[s].links)
                        if (comp_m.add(g)) { ls.push_back(g); stack.push_back(g); }
                }
        }
    }

    void reshare_whole(bool all, const std::vector<int>& touched) {
        std::vector<int> ls, fs;
        if (all) {
            for (int h = 0; h < static_cast<int>(links.size()); ++h)
                if (!links[h].flows.empty() || links[h].rate != 0.0) ls.push_back(h);
            for (int s = 0; s < static_cast<int>(flows.size()); ++s)
                if (flows[s].fid >= 0) fs.push_back(s);
        } else {
            component(touched, ls, fs);
        }
        for (int h : ls) {
            touch_link(h);
            links[h].rate = 0.0;
            keep_res[h] = links[h].cap;
        }
        std::vector<int> levels;
        for (int s : fs) levels.push_back(flows[s].level);
        std::sort(levels.begin(), levels.end());
        levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
        std::vector<int> at;
        for (int level : levels) {
            at.clear();
            for (int s : fs) if (flows[s].level == level) at.push_back(s);
            fill(at, true);
        }
        for (int h : ls) links[h].umax_ok = false;
    }

    void recompute(double t, bool all, const std::vector<int>& touched,
                   const std::vector<long long>& gone_fids, bool has_changed,
                   const std::vector<long long>& changed_fids, bool incremental, long max_flows,
                   double max_share) {
        begin(t);
        std::vector<int> gone, changed;
        for (long long fid : gone_fids) {
            auto it = slot.find(fid);
            if (it != slot.end()) gone.push_back(it->second);
        }
        for (long long fid : changed_fids) {
            auto it = slot.find(fid);
            if (it != slot.end()) changed.push_back(it->second);
        }
        if (all) {
            for (Link& l : links) l.umax_ok = false;
            for (int s : gone) remove(s);
            reshare_whole(true, touched);
        } else {
            for (int h : touched) links[h].umax_ok = false;
            if (incremental) {
                if (!reshare(touched, gone, has_changed, changed, max_flows, max_share)) {
                    reshare_whole(false, touched);
                }
            } else {
                for (int s : gone) remove(s);
                reshare_whole(false, touched);
            }
        }
        finish();
    }
};

template <class T>
std::vector<T> vec(const T* p, long n) { return n > 0 ? std::vector<T>(p, p + n) : std::vector<T>(); }

}  // namespace

extern "C" {

void* mm_new(int n_links) { return new Core(n_links); }
void mm_free(void* c) { delete static_cast<Core*>(c); }

void mm_set_links(void* c, long long fid, const int* hs, int n) {
    static_cast<Core*>(c)->set_links(fid, hs, n);
}

// weight, effective cap (inf: none) and priority level of a flow set_links created
void mm_set_flow(void* c, long long fid, double weight, double cap, int level) {
    Core* core = static_cast<Core*>(c);
    Flow& f = core->flows[core->slot.at(fid)];
    f.weight = weight;
    f.cap = cap;
    f.level = level;
}

// every link's KV capacity, the rate that counts as full and its background's bytes/s,
// from `now` on (the counters are integrated up to it first)
void mm_set_all_links(void* c, const double* kv_capacity, const double* kv_full,
                      const double* bg_rate, double now) {
    Core* core = static_cast<Core*>(c);
    core->now = std::max(core->now, now);
    for (size_t h = 0; h < core->links.size(); ++h) {
        core->settle(static_cast<int>(h));
        Link& l = core->links[h];
        l.cap = kv_capacity[h];
        l.full = kv_full[h];
        l.bg_rate = bg_rate[h];
    }
}

// every link's counters integrated up to `now`, written out (KV bytes, background bytes)
void mm_settle_all(void* c, double now, double* kv_bytes, double* bg_bytes) {
    Core* core = static_cast<Core*>(c);
    core->now = std::max(core->now, now);
    for (size_t h = 0; h < core->links.size(); ++h) {
        core->settle(static_cast<int>(h));
        kv_bytes[h] = core->links[h].kv_bytes;
        bg_bytes[h] = core->links[h].bg_bytes;
    }
}

void mm_kv_rates(void* c, double* out) {
    Core* core = static_cast<Core*>(c);
    for (size_t h = 0; h < core->links.size(); ++h) out[h] = core->links[h].rate;
}

// whether others keep one of these links saturated (ramp.TcpRamp._path_busy)
int mm_busy(void* c, const int* hs, int n) {
    Core* core = static_cast<Core*>(c);
    for (int k = 0; k < n; ++k) {
        const Link& l = core->links[hs[k]];
        if (0.0 < l.full && l.full <= l.rate) return 1;
    }
    return 0;
}

void mm_set_flows(void* c, const long long* fids, const double* weights, const double* caps,
                  const int* levels, long n) {
    for (long k = 0; k < n; ++k) mm_set_flow(c, fids[k], weights[k], caps[k], levels[k]);
}

void mm_forget_shares(void* c) {
    for (Link& l : static_cast<Core*>(c)->links) l.umax_ok = false;
}

// n_touched < 0: re-share everything; n_changed < 0: no `changed` list (see sharing.py).
// Returns how many flows' rates changed (mm_flows, mm_links read them).
long mm_recompute(void* c, double now, const int* touched, long n_touched, const long long* gone,
                  long n_gone, const long long* changed, long n_changed, int incremental,
                  long max_flows, double max_share) {
    Core* core = static_cast<Core*>(c);
    core->recompute(now, n_touched < 0, vec(touched, n_touched), vec(gone, n_gone), n_changed >= 0,
                    vec(changed, n_changed), incremental != 0, max_flows, max_share);
    return static_cast<long>(core->out_fid.size());
}

const long long* mm_flow_ids(void* c) { return static_cast<Core*>(c)->out_fid.data(); }
const double* mm_flow_rates(void* c) { return static_cast<Core*>(c)->out_rate.data(); }

}  // extern "C"
