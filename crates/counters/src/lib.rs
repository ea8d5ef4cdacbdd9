//! One way to declare counters. [`counters!`] makes, from one list of names with their docs:
//! a struct of `AtomicU64`s that threads bump, a plain `Copy` snapshot (serde, `+`), the
//! `(name, value)` pairs a Prometheus exporter walks, and each counter's doc as its help text.
//!
//! ```
//! mgrp_counters::counters! {
//!     /// What a worker did.
//!     pub struct Work => WorkSnapshot {
//!         /// Jobs finished
//!         done,
//!         /// Jobs that failed
//!         failed,
//!     }
//! }
//! let w = Work::default();
//! w.bump(&w.done, 2);
//! let s = w.snapshot();
//! assert_eq!((s.done, s.failed), (2, 0));
//! assert_eq!(s.pairs()[0], ("done", 2));
//! assert_eq!(WorkSnapshot::HELP[1], ("failed", "Jobs that failed"));
//! ```

#[doc(hidden)]
pub use serde;

// The derive names serde through this crate, also inside it (the tests).
extern crate self as mgrp_counters;

/// Declare a counter struct and its snapshot; see the crate docs.
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident => $snap:ident {
            $( $(#[doc = $doc:literal])* $field:ident ),* $(,)?
        }
    ) => {
        /// Live counters (relaxed atomics: each is exact, a snapshot is not a transaction).
        #[derive(Debug, Default)]
        $vis struct $name {
            $( $(#[doc = $doc])* pub $field: ::core::sync::atomic::AtomicU64, )*
        }

        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, $crate::serde::Serialize)]
        #[serde(crate = "::mgrp_counters::serde")]
        $vis struct $snap {
            $( $(#[doc = $doc])* pub $field: u64, )*
        }

        impl $name {
            /// Add `n` to one of this struct's counters.
            #[allow(dead_code)]
            pub fn bump(&self, c: &::core::sync::atomic::AtomicU64, n: u64) {
                c.fetch_add(n, ::core::sync::atomic::Ordering::Relaxed);
            }

            pub fn snapshot(&self) -> $snap {
                $snap {
                    $( $field: self.$field.load(::core::sync::atomic::Ordering::Relaxed), )*
                }
            }
        }

        impl $snap {
            /// Each counter's name and its doc (the help text of its metric).
            #[allow(dead_code)]
            pub const HELP: &'static [(&'static str, &'static str)] = &[
                $( (stringify!($field), concat!("" $(, $doc)*).trim_ascii()), )*
            ];

            /// (name, value) of every counter, in declaration order.
            pub fn pairs(&self) -> ::std::vec::Vec<(&'static str, u64)> {
                ::std::vec![ $( (stringify!($field), self.$field), )* ]
            }
        }

        impl ::core::ops::Add for $snap {
            type Output = $snap;
            fn add(self, o: $snap) -> $snap {
                $snap { $( $field: self.$field + o.$field, )* }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    counters! {
        /// Test counters.
        pub struct Demo => DemoSnapshot {
            /// Things seen
            seen,
            /// Things dropped
            /// (over two lines)
            dropped,
        }
    }

    #[test]
    fn snapshot_pairs_help_and_sum_agree() {
        let d = Demo::default();
        d.bump(&d.seen, 3);
        d.bump(&d.dropped, 1);
        d.bump(&d.seen, 1);
        let s = d.snapshot();
        assert_eq!(
            s,
            DemoSnapshot {
                seen: 4,
                dropped: 1
            }
        );
        assert_eq!(s.pairs(), vec![("seen", 4), ("dropped", 1)]);
        assert_eq!((s + s).seen, 8);
        assert_eq!(DemoSnapshot::HELP[0], ("seen", "Things seen"));
        assert_eq!(DemoSnapshot::HELP[1].0, "dropped");
        assert!(DemoSnapshot::HELP[1].1.contains("over two lines"));
        assert_eq!(
            serde_json::to_value(s).unwrap(),
            serde_json::json!({"seen": 4, "dropped": 1})
        );
    }
}
