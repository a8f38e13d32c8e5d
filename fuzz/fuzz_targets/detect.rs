//! libFuzzer entry point; the checks live in `mooncdc_fuzz::detect_and_read`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mooncdc_fuzz::detect_and_read(data));
