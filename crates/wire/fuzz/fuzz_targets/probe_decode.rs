#![no_main]
//! Any bytes: decode never panics; what decodes re-encodes to the same probe.

use libfuzzer_sys::fuzz_target;
use mgrp_wire::probe::{decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = decode(data) {
        let mut buf = vec![0u8; data.len()];
        let n = encode(&p.header, &p.riders.iter().collect::<Vec<_>>(), data.len(), &mut buf).expect("a decoded probe re-encodes");
        assert_eq!(n, data.len());
        assert_eq!(decode(&buf).expect("re-encoded probe decodes"), p);
    }
});
