//! Strictness the derived decoders lack: a record, cursor, event or schema
//! must be a JSON object (serde would also take an array of its members), an
//! enum a plain string, and an optional member either absent or a real value
//! (an explicit `null` is refused rather than read as "absent").

use serde::de::{
    self, value::MapAccessDeserializer, Deserialize, Deserializer, MapAccess, Visitor,
};
use std::fmt;
use std::marker::PhantomData;

/// `T`, accepted only from a JSON object.
pub struct Obj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// For `#[serde(default, deserialize_with = "present")]`: a member that is
/// there must hold a value; `null` is an error.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A string-only enum decoder: `names[i]` maps to `values[i]`.
pub fn one_of<'de, D: Deserializer<'de>, T: Copy>(
    d: D,
    what: &'static str,
    names: &'static [&'static str],
    values: &'static [T],
) -> Result<T, D::Error> {
    struct V<T: 'static> {
        what: &'static str,
        names: &'static [&'static str],
        values: &'static [T],
    }
    impl<T: Copy> Visitor<'_> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(
                f,
                "{} as a string: one of {}",
                self.what,
                self.names.join(", ")
            )
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
            match self.names.iter().position(|n| *n == s) {
                Some(i) => Ok(self.values[i]),
                None => Err(E::custom(format!(
                    "unknown {} {:?} (expected one of {})",
                    self.what,
                    s.chars().take(40).collect::<String>(),
                    self.names.join(", ")
                ))),
            }
        }
    }
    d.deserialize_str(V {
        what,
        names,
        values,
    })
}
