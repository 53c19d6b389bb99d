// The prefix caches of many decode instances, kept per trace id in runs as
// testbed/model/cache.py's PrefixCache keeps one (that module says why each step is so;
// it stays as the reference): per cache and trace id, c sub-blocks cached, the live
// holds' lengths, the unpinned runs [lo, hi) newest first; per cache an LRU of runs,
// oldest first; over all caches, which ones hold any block of a trace id.

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace {

// runs live in one pool over all caches (indices, not pointers: a run costs no allocation
// of its own, and the pool goes at once); each cache's LRU is a list threaded through it
struct Run {
    uint64_t group;
    int lo, hi;
    int prev, next;  // its neighbours in its cache's LRU (-1: none)
};

struct Group {
    int cached = 0;
    std::vector<int> holds;
    std::vector<int> runs;  // oldest (highest) first: cache.py's list reversed
};

struct Cache {
    int ratio = 1;
    std::unordered_map<uint64_t, Group> groups;
    int oldest = -1, newest = -1;  // the LRU's ends
    long long size = 0, pinned = 0;
};

struct Caches {
    std::vector<Cache> caches;
    std::unordered_map<uint64_t, std::vector<int>> holders;
    std::vector<Run> pool;
    std::vector<int> free_runs;

    int new_run(Cache& c, uint64_t group, int lo, int hi) {  // the newest run of `c`
        int r;
        if (free_runs.empty()) { r = static_cast<int>(pool.size()); pool.emplace_back(); }
        else { r = free_runs.back(); free_runs.pop_back(); }
        pool[r] = Run{group, lo, hi, c.newest, -1};
        if (c.newest >= 0) pool[c.newest].next = r; else c.oldest = r;
        c.newest = r;
        return r;
    }
    void drop_run(Cache& c, int r) {  // out of the LRU, back to the pool
        Run& run = pool[r];
        if (run.prev >= 0) pool[run.prev].next = run.next; else c.oldest = run.next;
        if (run.next >= 0) pool[run.next].prev = run.prev; else c.newest = run.prev;
        free_runs.push_back(r);
    }

    void held(uint64_t group, int owner) { holders[group].push_back(owner); }
    void lost(uint64_t group, int owner) {
        auto it = holders.find(group);
        if (it == holders.end()) return;
        auto& v = it->second;
        v.erase(std::find(v.begin(), v.end(), owner));
        if (v.empty()) holders.erase(it);
    }
};

void forget_if_empty(Cache& c, std::unordered_map<uint64_t, Group>::iterator it) {
    const Group& g = it->second;
    if (g.cached == 0 && g.holds.empty() && g.runs.empty()) c.groups.erase(it);
}

}  // namespace

extern "C" {

void* pc_new() { return new Caches(); }

void pc_free(void* p) { delete static_cast<Caches*>(p); }

int pc_add(void* p, int ratio) {
    Caches* all = static_cast<Caches*>(p);
    all->caches.emplace_back();
    all->caches.back().ratio = ratio;
    return static_cast<int>(all->caches.size()) - 1;
}

// 0, or 1 where a hold to extend was not there (the request did not hold it)
int pc_pin(void* p, int owner, const uint64_t* ids, long stop, long start) {
    Caches* all = static_cast<Caches*>(p);
    Cache& c = all->caches[owner];
    const long ratio = c.ratio;
    long long pinned = 0, size = 0;
    int bad = 0;
    for (long pos = start / ratio; pos < (stop + ratio - 1) / ratio; ++pos) {
        uint64_t group = ids[pos];
        long base = pos * ratio;
        int held = start > base ? static_cast<int>(start - base) : 0;
        int wanted = static_cast<int>(stop - base < ratio ? stop - base : ratio);
        if (held >= wanted) continue;
        Group& g = c.groups[group];
        int top = 0;
        if (g.holds.empty()) {
            g.holds.push_back(wanted);
        } else {
            top = *std::max_element(g.holds.begin(), g.holds.end());
            if (held) {
                auto it = std::find(g.holds.begin(), g.holds.end(), held);
                if (it == g.holds.end()) { bad = 1; break; }
                g.holds.erase(it);
            }
            g.holds.push_back(wanted);
            if (wanted <= top) continue;
        }
        pinned += wanted - top;
        while (!g.runs.empty() && all->pool[g.runs.back()].lo < wanted) {  // [top, wanted)
            int r = g.runs.back();                                            // leaves the LRU
            if (all->pool[r].hi <= wanted) {
                all->drop_run(c, r);
                g.runs.pop_back();
            } else {
                all->pool[r].lo = wanted;
            }
        }
        if (wanted > g.cached) {  // and [cached, wanted) comes in
            if (g.cached == 0) all->held(group, owner);
            size += wanted - g.cached;
            g.cached = wanted;
        }
    }
    c.pinned += pinned;
    c.size += size;
    return bad;
}

// 0, or 1 + the position of a trace id no request holds `stop`'s share of
long pc_unpin(void* p, int owner, const uint64_t* ids, long stop) {
    Caches* all = static_cast<Caches*>(p);
    Cache& c = all->caches[owner];
    const long ratio = c.ratio;
    long n = (stop + ratio - 1) / ratio;
    int held = static_cast<int>(stop - (n - 1) * ratio);  // the last id's share; ratio before
    long long released = 0;
    long bad = 0;
    for (long pos = n - 1; pos >= 0; --pos) {
        auto it = c.groups.find(ids[pos]);
        if (it == c.groups.end()) { bad = 1 + pos; break; }
        Group& g = it->second;
        auto at = std::find(g.holds.begin(), g.holds.end(), held);
        if (at == g.holds.end()) { bad = 1 + pos; break; }
        int top, rest;
        if (g.holds.size() == 1) {
            g.holds.clear();
            top = held;
            rest = 0;
        } else {
            top = *std::max_element(g.holds.begin(), g.holds.end());
            g.holds.erase(at);
            rest = *std::max_element(g.holds.begin(), g.holds.end());
            if (rest >= top) { held = static_cast<int>(ratio); continue; }
        }
        released += top - rest;  // [rest, top) is unpinned now: the newest run of this id
        g.runs.push_back(all->new_run(c, ids[pos], rest, top));
        held = static_cast<int>(ratio);
    }
    c.pinned -= released;
    return bad;
}

// evict least-recently-used unpinned blocks until `keep` blocks are left; how many went
long long pc_evict(void* p, int owner, long long keep) {
    Caches* all = static_cast<Caches*>(p);
    Cache& c = all->caches[owner];
    long long excess = std::min(c.size - keep, c.size - c.pinned);
    if (excess <= 0) return 0;
    long long left = excess;
    while (left) {
        int r = c.oldest;  // the oldest run: its id's highest
        Run& run = all->pool[r];
        auto it = c.groups.find(run.group);
        Group& g = it->second;
        long long k = std::min<long long>(run.hi - run.lo, left);
        if (k == run.hi - run.lo) {
            all->drop_run(c, r);
            g.runs.erase(g.runs.begin());
        } else {
            run.hi -= static_cast<int>(k);
        }
        g.cached -= static_cast<int>(k);
        if (!g.cached) all->lost(it->first, owner);
        left -= k;
        forget_if_empty(c, it);
    }
    c.size -= excess;
    return excess;
}

// leading full blocks of a request (n of them) cached here
long pc_lcp(void* p, int owner, const uint64_t* ids, long n_ids, long n) {
    Cache& c = static_cast<Caches*>(p)->caches[owner];
    const long ratio = c.ratio;
    long matched = 0;
    for (long k = 0; k < n_ids && matched < n; ++k) {
        long need = std::min(ratio, n - matched);
        auto it = c.groups.find(ids[k]);
        long cached = it == c.groups.end() ? 0 : it->second.cached;
        if (cached == 0) break;
        if (cached < need) return matched + cached;
        matched += need;
    }
    return std::min(matched, n);
}

long long pc_size(void* p, int owner) { return static_cast<Caches*>(p)->caches[owner].size; }
long long pc_pinned(void* p, int owner) { return static_cast<Caches*>(p)->caches[owner].pinned; }

int pc_cached(void* p, int owner, uint64_t group) {
    Cache& c = static_cast<Caches*>(p)->caches[owner];
    auto it = c.groups.find(group);
    return it == c.groups.end() ? 0 : it->second.cached;
}

// the trace ids this cache holds blocks of and how many (the first `cap`); how many there are
long pc_groups(void* p, int owner, uint64_t* groups, int* counts, long cap) {
    Cache& c = static_cast<Caches*>(p)->caches[owner];
    long n = 0;
    for (auto& [group, g] : c.groups)
        if (g.cached) {
            if (n < cap) { groups[n] = group; counts[n] = g.cached; }
            ++n;
        }
    return n;
}

// the caches that hold any block of a trace id (the first `cap`); how many there are
long pc_holders(void* p, uint64_t group, int* owners, long cap) {
    Caches* all = static_cast<Caches*>(p);
    auto it = all->holders.find(group);
    if (it == all->holders.end()) return 0;
    long n = static_cast<long>(it->second.size());
    for (long k = 0; k < n && k < cap; ++k) owners[k] = it->second[k];
    return n;
}

}  // extern "C"
