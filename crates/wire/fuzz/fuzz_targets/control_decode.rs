#![no_main]
//! Any bytes: framing and decoding never panic; what decodes re-encodes byte for byte.

use libfuzzer_sys::fuzz_target;
use mgrp_wire::control::Control;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((msg, n))) = Control::decode_frame(data) {
        let mut out = Vec::new();
        msg.encode(&mut out).expect("a decoded message re-encodes");
        assert_eq!(&out[..], &data[..n]);
    }
});
