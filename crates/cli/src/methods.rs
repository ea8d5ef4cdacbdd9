//! `--method` values: the methods of `mgrp_estimate::methods`, each with its one-line help.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use mgrp_estimate::methods::Method;

/// Parses a method name as clap shows and checks it (possible values listed in `--help`).
pub fn parser() -> impl TypedValueParser<Value = Method> {
    PossibleValuesParser::new(Method::ALL.map(|m| PossibleValue::new(m.name()).help(m.about())))
        .try_map(|s| Method::from_name(&s))
}
