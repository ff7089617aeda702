//! The sampling parameters diag sends (`temperature`, `seed`), and the recognition of an
//! endpoint that refuses one (openspec/specs/model-endpoint/spec.md, "Sampling"). A refusal is
//! learned like the structured-output form: the request goes again at once without the
//! parameter, and the endpoint's [`super::EndpointMemory`] (and the run store) remember it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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

/// The sampling parameters, of those `sent`, that an error answer refuses: an HTTP 400 or 422
/// whose text names the parameter as a word (OpenAI's reasoning models: "Unsupported value:
/// 'temperature' does not support 0 with this model"; a strict server: "Unrecognized request
/// argument supplied: seed"). Nothing for any other status, or a text that names none of them.
pub fn refused_sampling(status: u16, text: &str, sent: &[SamplingParameter]) -> RefusedSampling {
    if !matches!(status, 400 | 422) {
        return RefusedSampling::default();
    }
    let lower = text.to_ascii_lowercase();
    sent.iter()
        .filter(|p| names_word(&lower, p.as_str()))
        .fold(RefusedSampling::default(), |r, p| r.with(*p))
}

/// Whether `word` occurs in `text` with no letter, digit or `_` on either side.
fn names_word(text: &str, word: &str) -> bool {
    let inside = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(word).any(|(at, _)| {
        !inside(text[..at].chars().next_back()) && !inside(text[at + word.len()..].chars().next())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use SamplingParameter::{Seed, Temperature};

    #[test]
    fn a_refusal_names_a_sent_parameter_in_a_400_or_422() {
        let openai = "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.";
        assert_eq!(
            refused_sampling(400, openai, &[Temperature, Seed]).parameters(),
            vec![Temperature]
        );
        assert_eq!(
            refused_sampling(
                422,
                "Unrecognized request argument supplied: seed",
                &[Temperature, Seed]
            )
            .parameters(),
            vec![Seed]
        );
        // Not sent, other statuses, other words.
        assert!(refused_sampling(400, openai, &[Seed]).is_empty());
        assert!(refused_sampling(500, openai, &[Temperature]).is_empty());
        assert!(refused_sampling(429, openai, &[Temperature]).is_empty());
        assert!(refused_sampling(
            400,
            "the seeded cache is full; temperatures vary",
            &[Temperature, Seed]
        )
        .is_empty());
        assert!(refused_sampling(
            400,
            "maximum context length is 2048 tokens",
            &[Temperature, Seed]
        )
        .is_empty());
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
