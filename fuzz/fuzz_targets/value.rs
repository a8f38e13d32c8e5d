//! libFuzzer entry point; the checks live in `mooncdc_fuzz::value`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mooncdc_fuzz::value(data));
