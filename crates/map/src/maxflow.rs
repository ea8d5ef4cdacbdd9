//! Maximum flow (Edmonds–Karp: shortest augmenting paths) on small graphs with real
//! capacities, infinity allowed. Netmapper's graphs have tens of nodes; this is ~50 lines,
//! checked against a brute-force minimum cut in the tests. (petgraph, the field's graph
//! crate, is not in the workspace; its max-flow arrived only in 0.8 and wants its own graph
//! type — not worth a dependency for this.)

/// A flow network over nodes `0..n`.
#[derive(Debug, Clone)]
pub struct FlowNet {
    n: usize,
    cap: Vec<Vec<f64>>,
}

/// Augmenting paths stop below this (bit/s-scale capacities; numerical dust).
const EPS: f64 = 1e-6;

impl FlowNet {
    pub fn new(n: usize) -> FlowNet {
        FlowNet {
            n,
            cap: vec![vec![0.0; n]; n],
        }
    }

    /// Add capacity `c` (≥ 0, may be infinite) from `u` to `v`; parallel arcs add up.
    pub fn add(&mut self, u: usize, v: usize, c: f64) {
        if u != v && c > 0.0 {
            self.cap[u][v] += c;
        }
    }

    /// The maximum flow from `s` to `t` (infinite when an all-infinite path exists).
    pub fn max_flow(&self, s: usize, t: usize) -> f64 {
        if s == t {
            return f64::INFINITY;
        }
        let mut res = self.cap.clone();
        let mut total = 0.0;
        // Each augmentation saturates at least one arc of a shortest path: bounded by
        // O(V·E) rounds; the cap below only guards against float dust.
        for _ in 0..(self.n * self.n * self.n + 16) {
            let mut prev = vec![usize::MAX; self.n];
            prev[s] = s;
            let mut queue = std::collections::VecDeque::from([s]);
            while let Some(u) = queue.pop_front() {
                for v in 0..self.n {
                    if prev[v] == usize::MAX && res[u][v] > EPS {
                        prev[v] = u;
                        queue.push_back(v);
                    }
                }
            }
            if prev[t] == usize::MAX {
                break;
            }
            let mut push = f64::INFINITY;
            let mut v = t;
            while v != s {
                push = push.min(res[prev[v]][v]);
                v = prev[v];
            }
            if push.is_infinite() {
                return f64::INFINITY;
            }
            let mut v = t;
            while v != s {
                let u = prev[v];
                res[u][v] -= push;
                res[v][u] += push;
                v = u;
            }
            total += push;
        }
        total
    }

    /// The minimum `s`–`t` cut by trying every node subset (tests only: n ≤ ~12).
    pub fn brute_min_cut(&self, s: usize, t: usize) -> f64 {
        let mut best = f64::INFINITY;
        for mask in 0u32..(1 << self.n) {
            if mask & (1 << s) == 0 || mask & (1 << t) != 0 {
                continue;
            }
            let mut c = 0.0;
            for u in 0..self.n {
                for v in 0..self.n {
                    if mask & (1 << u) != 0 && mask & (1 << v) == 0 {
                        c += self.cap[u][v];
                    }
                }
            }
            best = f64::min(best, c);
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (no dependency): xorshift.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn max_flow_equals_the_brute_force_min_cut_on_random_small_graphs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..300 {
            let n = 2 + (rng(&mut seed) % 7) as usize;
            let mut g = FlowNet::new(n);
            for u in 0..n {
                for v in 0..n {
                    let r = rng(&mut seed) % 10;
                    if r < 3 {
                        g.add(u, v, (rng(&mut seed) % 40) as f64 + 0.5);
                    } else if r == 3 {
                        g.add(u, v, f64::INFINITY);
                    }
                }
            }
            let (s, t) = (0, n - 1);
            let (a, b) = (g.max_flow(s, t), g.brute_min_cut(s, t));
            assert!(
                (a.is_infinite() && b.is_infinite()) || (a - b).abs() < 1e-6,
                "case {case}: max flow {a} vs min cut {b}"
            );
        }
    }

    #[test]
    fn classic_example() {
        // CLRS fig. 26.1: 23.
        let mut g = FlowNet::new(6);
        for (u, v, c) in [
            (0, 1, 16.0),
            (0, 2, 13.0),
            (2, 1, 4.0),
            (1, 3, 12.0),
            (3, 2, 9.0),
            (2, 4, 14.0),
            (4, 3, 7.0),
            (3, 5, 20.0),
            (4, 5, 4.0),
        ] {
            g.add(u, v, c);
        }
        assert_eq!(g.max_flow(0, 5), 23.0);
        assert_eq!(g.max_flow(5, 0), 0.0);
    }
}
