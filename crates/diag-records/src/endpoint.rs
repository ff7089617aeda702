//! What an endpoint taught is keyed by [`Endpoint`]: the base URL of an OpenAI-compatible
//! server and the model name. The base URL is kept without what must never be stored or
//! shown (userinfo, query, fragment), so the key can go into a run store and a trace as it
//! is. What it taught ([`Learned`]: a structured-output form, a context size, refused
//! sampling parameters, [`SamplingParameter`]) is plain data the agent runtime's endpoint
//! memory holds and the run store keeps for the next process.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::StructuredOutput;

/// One model behind one server: the key of what it taught.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Endpoint {
    /// The base URL without userinfo, query or fragment, and without a trailing `/`
    /// (see [`Endpoint::new`]).
    pub base_url: String,
    pub model: String,
}

impl Endpoint {
    /// The key of `model` behind `base_url`, the URL stripped of `user:password@`, `?query`
    /// and `#fragment` (a gateway's query may hold a key) and of a trailing `/`.
    pub fn new(base_url: &str, model: &str) -> Endpoint {
        Endpoint {
            base_url: strip_url(base_url),
            model: model.trim().to_string(),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.base_url, self.model)
    }
}

/// `url` without userinfo, query, fragment and trailing `/`: only scheme, host, port and path
/// are kept.
pub fn strip_url(url: &str) -> String {
    let url = url.trim();
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = match url.find("://") {
        Some(at) => (&url[..at + 3], &url[at + 3..]),
        None => ("", url),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, ""),
    };
    // The userinfo ends at the last `@` of the authority (a password may hold an `@`).
    let host = authority.rsplit('@').next().unwrap_or_default();
    format!("{scheme}{host}{}", path.trim_end_matches('/'))
}

/// What one endpoint taught.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Learned {
    /// The structured-output form to use from now on (after refusals).
    pub form: Option<StructuredOutput>,
    /// The context size a context-length error stated.
    pub context_tokens: Option<u32>,
    /// The sampling parameters it refused: never sent to it again.
    pub refused_sampling: RefusedSampling,
}

/// A sampling parameter diag may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplingParameter {
    Temperature,
    Seed,
}

impl SamplingParameter {
    /// Every parameter, in the order they are written.
    pub const ALL: [SamplingParameter; 2] =
        [SamplingParameter::Temperature, SamplingParameter::Seed];

    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            SamplingParameter::Temperature => "temperature",
            SamplingParameter::Seed => "seed",
        }
    }
}

/// The sampling parameters an endpoint refused. Written as the list of their names
/// (`["temperature"]`); a refusal is only ever added, never forgotten.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusedSampling {
    pub temperature: bool,
    pub seed: bool,
}

impl RefusedSampling {
    /// Whether `p` was refused.
    pub fn refuses(self, p: SamplingParameter) -> bool {
        match p {
            SamplingParameter::Temperature => self.temperature,
            SamplingParameter::Seed => self.seed,
        }
    }

    /// These refusals and `p`.
    pub fn with(mut self, p: SamplingParameter) -> RefusedSampling {
        match p {
            SamplingParameter::Temperature => self.temperature = true,
            SamplingParameter::Seed => self.seed = true,
        }
        self
    }

    /// Both sets of refusals.
    pub fn union(self, other: RefusedSampling) -> RefusedSampling {
        RefusedSampling {
            temperature: self.temperature || other.temperature,
            seed: self.seed || other.seed,
        }
    }

    /// The refused parameters, in [`SamplingParameter::ALL`]'s order.
    pub fn parameters(self) -> Vec<SamplingParameter> {
        SamplingParameter::ALL
            .into_iter()
            .filter(|p| self.refuses(*p))
            .collect()
    }

    pub fn is_empty(self) -> bool {
        !(self.temperature || self.seed)
    }
}

impl Serialize for RefusedSampling {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.parameters().serialize(s)
    }
}

impl<'de> Deserialize<'de> for RefusedSampling {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let list = Vec::<SamplingParameter>::deserialize(d)?;
        Ok(list
            .into_iter()
            .fold(RefusedSampling::default(), RefusedSampling::with))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SamplingParameter::{Seed, Temperature};

    #[test]
    fn the_key_keeps_no_credentials_query_or_fragment() {
        let e = Endpoint::new(
            " https://user:p@ss@gw.example:8443/v1/?api-key=s3cret#x ",
            " m ",
        );
        assert_eq!(e.base_url, "https://gw.example:8443/v1");
        assert_eq!(e.model, "m");
        assert_eq!(strip_url("http://h:8080"), "http://h:8080");
        assert_eq!(strip_url("http://h/v1/"), "http://h/v1");
        assert_eq!(strip_url("http://k@h/v1?a=b"), "http://h/v1");
        assert_eq!(e.to_string(), "https://gw.example:8443/v1 m");
    }

    #[test]
    fn refusals_are_written_as_their_names_and_only_added() {
        let r = RefusedSampling::default().with(Seed).with(Temperature);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"["temperature","seed"]"#
        );
        let back: RefusedSampling = serde_json::from_str(r#"["seed"]"#).unwrap();
        assert_eq!(back, RefusedSampling::default().with(Seed));
        assert_eq!(back.union(RefusedSampling::default().with(Temperature)), r);
        assert_eq!(
            serde_json::to_string(&RefusedSampling::default()).unwrap(),
            "[]"
        );
    }
}
