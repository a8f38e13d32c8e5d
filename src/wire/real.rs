//! REAL values on the wire: the exact significand-and-exponent pair, its
//! canonical encoding, and the read-only decimal form, parsed correctly
//! rounded with an exact big-integer check (docs/FORMAT.md §2).

use super::value::{check_canonical_integer, quote, MAX_NUMBER_DIGITS};

// ---------------------------------------------------------------- REAL

/// The exact pair for a finite f64: `(significand, exponent)` as written on the wire.
pub fn real_to_pair(x: f64) -> (i64, i32) {
    debug_assert!(x.is_finite());
    let bits = x.to_bits();
    let negative = bits >> 63 == 1;
    let exp_field = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if exp_field == 0 && frac == 0 {
        return (0, 0);
    }
    let (mut m, mut e) = if exp_field == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp_field - 1075)
    };
    let tz = m.trailing_zeros();
    m >>= tz;
    e += tz as i32;
    let m = m as i64;
    (if negative { -m } else { m }, e)
}

/// Write a REAL value as its three-element wire form.
pub fn write_real(out: &mut Vec<u8>, x: f64) {
    let (m, e) = real_to_pair(x);
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"[\"real\",\"");
    if m == 0 && x.is_sign_negative() {
        out.push(b'-');
    }
    out.extend_from_slice(b.format(m).as_bytes());
    out.extend_from_slice(b"\",\"");
    out.extend_from_slice(b.format(e).as_bytes());
    out.extend_from_slice(b"\"]");
}

/// Decode the exact pair form. `sig` may be `-0` (negative zero); otherwise both
/// strings are canonical decimal integers of at most 400 digits.
pub fn parse_real_pair(sig: &str, exp: &str) -> Result<f64, String> {
    if sig == "-0" {
        check_canonical_integer(exp).map_err(|e| format!("REAL exponent: {e}"))?;
        return Ok(-0.0);
    }
    check_canonical_integer(sig).map_err(|e| format!("REAL significand: {e}"))?;
    check_canonical_integer(exp).map_err(|e| format!("REAL exponent: {e}"))?;
    let negative = sig.starts_with('-');
    let digits = sig.trim_start_matches('-');
    if digits == "0" {
        return Ok(0.0);
    }
    // Exponents beyond this range can never give a finite nonzero binary64,
    // whatever the significand (at most ~1330 bits for 400 digits).
    let exp: i64 = match exp.parse::<i64>() {
        Ok(e) if (-5000..=5000).contains(&e) => e,
        _ => {
            return Err(format!(
                "REAL exponent {} is out of range for a finite binary64",
                quote(exp)
            ))
        }
    };
    // Most significands fit 64 bits: skip the big integer for them.
    let (m, tz, width) = match digits.parse::<u64>() {
        Ok(v) if digits.len() <= 19 => {
            let tz = v.trailing_zeros();
            let m = v >> tz;
            (m, tz, 64 - m.leading_zeros())
        }
        _ => {
            let mut big = BigUint::from_decimal(digits);
            let tz = big.trailing_zeros();
            big.shift_right(tz);
            (big.low_u64(), tz, big.bit_len())
        }
    };
    if width > 53 {
        return Err(format!(
            "REAL significand {} is {} bits wide after removing trailing zeros; binary64 holds 53",
            quote(sig),
            width
        ));
    }
    let e = exp + tz as i64; // value = m × 2^e, m odd
    let top = e + width as i64 - 1; // position of the highest set bit
    if top > 1023 {
        return Err(format!(
            "REAL {} × 2^{} overflows binary64",
            quote(sig),
            exp
        ));
    }
    if e < -1074 {
        return Err(format!(
            "REAL {} × 2^{} is not exactly representable (it would need subnormal rounding)",
            quote(sig),
            exp
        ));
    }
    let bits = if top >= -1022 {
        let field = (top + 1023) as u64;
        let mant = (m << (53 - width)) & ((1u64 << 52) - 1);
        (field << 52) | mant
    } else {
        m << (e + 1074)
    };
    let x = f64::from_bits(bits);
    Ok(if negative { -x } else { x })
}

/// Decode the 0.1.0 two-element decimal form (`["real","0.1"]`), correctly rounded.
pub fn parse_real_decimal(s: &str) -> Result<f64, String> {
    if s.len() > MAX_NUMBER_DIGITS {
        return Err(format!(
            "REAL decimal string of {} characters is longer than {}",
            s.len(),
            MAX_NUMBER_DIGITS
        ));
    }
    if !is_json_number(s) {
        return Err(format!("{} is not a decimal number", quote(s)));
    }
    let x: f64 = s
        .parse()
        .map_err(|_| format!("{} is not a decimal number", quote(s)))?;
    if !x.is_finite() {
        return Err(format!("REAL {} overflows binary64", quote(s)));
    }
    Ok(x)
}

/// JSON number syntax: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_len = i - int_start;
    if int_len == 0 || (int_len > 1 && b[int_start] == b'0') {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == s {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e') | Some(b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+') | Some(b'-')) {
            i += 1;
        }
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == s {
            return false;
        }
    }
    i == b.len()
}

/// Just enough of an unsigned big integer to check an exact significand.
struct BigUint {
    limbs: Vec<u32>, // little-endian
}

impl BigUint {
    fn from_decimal(digits: &str) -> Self {
        let mut limbs: Vec<u32> = vec![0];
        for d in digits.bytes() {
            let mut carry = (d - b'0') as u64;
            for l in limbs.iter_mut() {
                let v = (*l as u64) * 10 + carry;
                *l = v as u32;
                carry = v >> 32;
            }
            if carry > 0 {
                limbs.push(carry as u32);
            }
        }
        BigUint { limbs }
    }

    fn trailing_zeros(&self) -> u32 {
        let mut n = 0;
        for l in &self.limbs {
            if *l == 0 {
                n += 32;
            } else {
                return n + l.trailing_zeros();
            }
        }
        n
    }

    fn shift_right(&mut self, n: u32) {
        let words = (n / 32) as usize;
        let bits = n % 32;
        self.limbs.drain(..words.min(self.limbs.len()));
        if bits > 0 {
            let len = self.limbs.len();
            for i in 0..len {
                let hi = if i + 1 < len { self.limbs[i + 1] } else { 0 };
                self.limbs[i] = (self.limbs[i] >> bits) | (hi << (32 - bits));
            }
        }
        while self.limbs.len() > 1 && *self.limbs.last().unwrap_or(&1) == 0 {
            self.limbs.pop();
        }
    }

    fn bit_len(&self) -> u32 {
        for (i, l) in self.limbs.iter().enumerate().rev() {
            if *l != 0 {
                return i as u32 * 32 + 32 - l.leading_zeros();
            }
        }
        0
    }

    fn low_u64(&self) -> u64 {
        let lo = *self.limbs.first().unwrap_or(&0) as u64;
        let hi = *self.limbs.get(1).unwrap_or(&0) as u64;
        lo | (hi << 32)
    }
}
