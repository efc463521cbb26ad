//! Key mapping: reading logs that name our input keys their own way. `--field OUR=THEIRS`
//! and the policy's `[fields]` say where each of our keys is in the log (a nested path such
//! as `kubernetes.labels.app` or `attributes["http.route"]`); `[hop_values]` turns the
//! log's hop names into ours; `--attempt-base 0`, `--time-unit` and the derived keys
//! (`retry_count`, `duration`, `duration_ms`, …) turn its numbers into ours.
//!
//! A mapped line never takes the JSON Lines fast path: it is parsed into a JSON value (a
//! logfmt line into a flat object, a Parquet row into its cells), the mapping fills the
//! same [`RawFields`] a plain line fills, and [`RawFields::check`] validates it as it does
//! every line. With no mapping given, none of this runs: the plain path stays as fast as it
//! was (BENCHMARKS.md).
//!
//! ```text
//! --field operation_id=request_id --field hop=kubernetes.labels.app --field retry_count=retries
//! {"request_id":"r-1","kubernetes":{"labels":{"app":"checkout-api"}},"retries":0,…}
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::duration;
use super::fields::{self, field_index, CheckedLine, RawFields, Scalar, FIELDS};
use crate::model::Millis;
use crate::rules::HopOrder;

/// A unit of time, for numeric times (`--time-unit`) and durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Ns,
    Us,
    Ms,
    S,
}

/// Every unit with the names it is written with (the first is its name in messages).
const UNITS: [(TimeUnit, &[&str]); 4] = [
    (TimeUnit::Ns, &["ns"]),
    // The micro sign and the Greek mu look alike; loggers write either.
    (TimeUnit::Us, &["us", "µs", "μs"]),
    (TimeUnit::Ms, &["ms"]),
    (TimeUnit::S, &["s"]),
];

impl TimeUnit {
    pub fn parse(name: &str) -> Option<TimeUnit> {
        UNITS
            .iter()
            .find(|(_, names)| names.contains(&name))
            .map(|&(unit, _)| unit)
    }

    pub fn name(self) -> &'static str {
        UNITS
            .iter()
            .find(|(unit, _)| *unit == self)
            .map_or("ms", |(_, names)| names[0])
    }

    /// The units' names, for messages: `ns, us, ms, s`.
    pub fn all_names() -> String {
        UNITS.map(|(_, names)| names[0]).join(", ")
    }

    /// `n` of this unit in milliseconds. Dividing (not multiplying by 1e-6) keeps whole
    /// milliseconds exact.
    fn to_ms(self, n: f64) -> Millis {
        match self {
            TimeUnit::Ns => n / 1e6,
            TimeUnit::Us => n / 1e3,
            TimeUnit::Ms => n,
            TimeUnit::S => n * 1e3,
        }
    }
}

/// A key that only a mapping reads: one of our keys written in another form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Derived {
    /// Retries before this attempt: `attempt` = retry count + 1.
    RetryCount,
    /// How long the attempt took: the finish is the start plus it (or the start is the
    /// finish minus it). `None`: the unit is written in the value (`250ms`), else it is the
    /// time unit.
    Duration(Option<TimeUnit>),
}

/// The derived keys by the name `--field` knows them by.
const DERIVED: [(&str, Derived); 6] = [
    ("retry_count", Derived::RetryCount),
    ("duration", Derived::Duration(None)),
    ("duration_ns", Derived::Duration(Some(TimeUnit::Ns))),
    ("duration_us", Derived::Duration(Some(TimeUnit::Us))),
    ("duration_ms", Derived::Duration(Some(TimeUnit::Ms))),
    ("duration_s", Derived::Duration(Some(TimeUnit::S))),
];

/// The time keys of [`FIELDS`]: a numeric value of these is in the time unit.
const TIME_KEYS: [&str; 7] = [
    "start_ms",
    "finish_ms",
    "start",
    "finish",
    "t_ms",
    "ts",
    "time",
];

/// What one mapped key fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The field of [`FIELDS`] at this index.
    Field(usize),
    Derived(Derived),
}

impl Target {
    /// What the key gives a line: two keys that give the same thing cannot both be mapped.
    fn fills(self) -> &'static str {
        match self {
            Target::Derived(Derived::RetryCount) => "attempt",
            Target::Derived(Derived::Duration(_)) => "duration",
            Target::Field(i) => FIELDS[i].name(),
        }
    }
}

/// One step of a key path: a key of an object, or a position in an array.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Where a key is in the log's lines: `request_id`, `kubernetes.labels.app` (nested
/// objects), `attributes["http.route"]` (a key with dots in it), `tags[0]` (an array's
/// first element).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPath {
    written: String,
    steps: Vec<Step>,
}

impl KeyPath {
    pub fn parse(text: &str) -> Result<KeyPath, String> {
        let written = text.trim();
        let mut steps = Vec::new();
        let mut rest = written;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('[') {
                let (step, after) = bracket(after).ok_or_else(|| {
                    format!("\"{written}\": a '[' opens a quoted key [\"a.b\"] or an array position [0] that does not close")
                })?;
                steps.push(step);
                rest = after;
            } else {
                if !steps.is_empty() {
                    rest = rest.strip_prefix('.').ok_or_else(|| {
                        format!("\"{written}\": expected '.' or '[' after a key, at \"{rest}\"")
                    })?;
                }
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                let key = &rest[..end];
                if key.is_empty() || key.contains(']') {
                    return Err(format!(
                        "\"{written}\": an empty key (two dots, or a dot at an end); write a key with dots in it as [\"a.b\"]"
                    ));
                }
                steps.push(Step::Key(key.to_string()));
                rest = &rest[end..];
            }
        }
        if steps.is_empty() {
            return Err("an empty key: name the log's key, or '-' if the log has none".into());
        }
        Ok(KeyPath {
            written: written.to_string(),
            steps,
        })
    }

    /// The path as one flat key, as logfmt keys and Parquet columns are written:
    /// `kubernetes.labels.app`, `attributes.http.route`.
    pub fn flat(&self) -> String {
        let mut flat = String::new();
        for step in &self.steps {
            match step {
                Step::Key(key) => {
                    if !flat.is_empty() {
                        flat.push('.');
                    }
                    flat.push_str(key);
                }
                Step::Index(i) => flat.push_str(&format!("[{i}]")),
            }
        }
        flat
    }

    /// The value at the path in a line's object: nested objects and arrays first, then
    /// the whole path as one key (`{"kubernetes.labels.app": …}`, and every logfmt key).
    pub(super) fn find<'v>(&self, object: &'v Map<String, Value>) -> Option<&'v Value> {
        let mut steps = self.steps.iter();
        let mut at = match steps.next()? {
            Step::Key(key) => object.get(key),
            Step::Index(_) => None,
        };
        for step in steps {
            at = match (step, at) {
                (Step::Key(key), Some(Value::Object(o))) => o.get(key),
                (Step::Index(i), Some(Value::Array(a))) => a.get(*i),
                _ => None,
            };
        }
        at.or_else(|| {
            (self.steps.len() > 1)
                .then(|| object.get(&self.flat()))
                .flatten()
        })
    }
}

/// After a `[`: a quoted key (`"http.route"` or `'http.route'`, backslash escapes the next
/// character) or an array position, up to the `]`; the step and the text after the `]`.
fn bracket(text: &str) -> Option<(Step, &str)> {
    let quote = text.chars().next()?;
    if quote == '"' || quote == '\'' {
        let mut key = String::new();
        let mut chars = text[1..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => key.push(chars.next()?.1),
                c if c == quote => {
                    let after = text[1 + i + 1..].strip_prefix(']')?;
                    return Some((Step::Key(key), after));
                }
                c => key.push(c),
            }
        }
        None
    } else {
        let end = text.find(']')?;
        let index = text[..end].trim().parse().ok()?;
        Some((Step::Index(index), &text[end + 1..]))
    }
}

/// One of our keys read from the log: where, and who said so (for messages).
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    /// Our key's name.
    ours: &'static str,
    target: Target,
    /// `None`: `-`, the log has no such key (its own spellings are not read either).
    path: Option<KeyPath>,
    /// `--field` or the policy's `[fields]`.
    origin: String,
}

/// How to read a log that names our keys its own way. Built from the flags and the policy
/// file; [`KeyMapping::is_plain`] when it changes nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyMapping {
    entries: Vec<Entry>,
    /// The log's hop name → ours.
    hop_values: BTreeMap<String, String>,
    /// The number of the original attempt in the log: 1 (ours) or 0.
    pub attempt_base: u32,
    /// The unit of numeric times.
    pub time_unit: TimeUnit,
}

impl Default for KeyMapping {
    fn default() -> Self {
        KeyMapping {
            entries: Vec::new(),
            hop_values: BTreeMap::new(),
            attempt_base: 1,
            time_unit: TimeUnit::Ms,
        }
    }
}

/// Our keys, as messages list them.
fn our_keys() -> String {
    let native: Vec<&str> = FIELDS.iter().map(|f| f.name()).collect();
    let derived: Vec<&str> = DERIVED.iter().map(|(name, _)| *name).collect();
    format!("{}; and {}", native.join(", "), derived.join(", "))
}

impl KeyMapping {
    /// Nothing to map: lines take the plain path.
    pub fn is_plain(&self) -> bool {
        *self == KeyMapping::default()
    }

    /// Adds `OUR = THEIRS` pairs from `origin` (`--field`, `policy [fields]`); a later
    /// pair for the same key of ours replaces an earlier one (flags override the policy).
    pub fn add_fields(
        &mut self,
        origin: &str,
        pairs: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), String> {
        let mut given: Vec<&'static str> = Vec::new();
        for (ours, theirs) in pairs {
            let (ours, theirs) = (ours.trim(), theirs.trim());
            let (name, target) = match field_index(ours) {
                Some(i) => (FIELDS[i].name(), Target::Field(i)),
                None => match DERIVED.iter().find(|(name, _)| *name == ours) {
                    Some(&(name, derived)) => (name, Target::Derived(derived)),
                    None => {
                        return Err(format!(
                            "{origin}: \"{ours}\" is not one of our keys; map one of {}",
                            our_keys()
                        ))
                    }
                },
            };
            if given.contains(&name) {
                return Err(format!("{origin}: {name} is mapped twice"));
            }
            given.push(name);
            let path = match theirs {
                "" => {
                    return Err(format!(
                        "{origin}: {name} needs the log's key, e.g. {name}=request_id, or '-' if the log has none"
                    ))
                }
                "-" => None,
                _ => Some(KeyPath::parse(theirs).map_err(|e| format!("{origin}: {name}: {e}"))?),
            };
            self.put(Entry {
                ours: name,
                target,
                path,
                origin: origin.to_string(),
            });
        }
        self.check_one_key_per_field(origin)
    }

    /// Puts `entry` in. A later origin (the flags) replaces what an earlier one (the
    /// policy, a preset) said of the same key, or of the same thing in another form
    /// (`retry_count` for `attempt`). Returns the entries it replaced, in order.
    fn put(&mut self, entry: Entry) -> Vec<Entry> {
        let (replaced, kept) =
            std::mem::take(&mut self.entries)
                .into_iter()
                .partition(|e: &Entry| {
                    e.ours == entry.ours
                        || (e.origin != entry.origin && e.target.fills() == entry.target.fills())
                });
        self.entries = kept;
        self.entries.push(entry);
        replaced
    }

    /// Two keys that fill one field would make a line say two things.
    fn check_one_key_per_field(&self, origin: &str) -> Result<(), String> {
        for (i, a) in self.entries.iter().enumerate() {
            if let Some(b) = self.entries[..i].iter().find(|b| {
                b.target.fills() == a.target.fills() && b.path.is_some() && a.path.is_some()
            }) {
                return Err(format!(
                    "{origin}: {} and {} both give the {}: map one of them",
                    b.ours,
                    a.ours,
                    a.target.fills()
                ));
            }
        }
        Ok(())
    }

    /// Lays `over` (the flags' and the policy's mapping) over this one (a preset's): each of
    /// its keys replaces what this one said of the same key, as a flag replaces the
    /// policy. Returns a sentence for each key so replaced, for the user to see once.
    pub fn overlay(&mut self, over: &KeyMapping) -> Result<Vec<String>, String> {
        let mut replaced = Vec::new();
        for entry in &over.entries {
            if let Some(before) = self
                .put(entry.clone())
                .into_iter()
                .find(|e| e.origin != entry.origin)
            {
                replaced.push(format!(
                    "{} {}={} replaces {}'s {}={}",
                    entry.origin,
                    entry.ours,
                    entry.written(),
                    before.origin,
                    before.ours,
                    before.written()
                ));
            }
            self.check_one_key_per_field(&entry.origin)?;
        }
        self.hop_values
            .extend(over.hop_values.iter().map(|(k, v)| (k.clone(), v.clone())));
        let plain = KeyMapping::default();
        if over.attempt_base != plain.attempt_base {
            self.attempt_base = over.attempt_base;
        }
        if over.time_unit != plain.time_unit {
            self.time_unit = over.time_unit;
        }
        Ok(replaced)
    }

    /// Adds `VALUE = HOP` pairs: a line whose hop is VALUE is at our hop HOP.
    pub fn add_hop_values(
        &mut self,
        origin: &str,
        pairs: impl IntoIterator<Item = (String, String)>,
        hops: &HopOrder,
    ) -> Result<(), String> {
        for (value, hop) in pairs {
            let (value, hop) = (value.trim(), hop.trim());
            if value.is_empty() {
                return Err(format!(
                    "{origin}: the log's hop value is empty, e.g. checkout-api=caller"
                ));
            }
            if hops.index_of(hop).is_none() {
                return Err(format!(
                    "{origin}: {value} = \"{hop}\": unknown hop; known hops are {} (set another order with --hops)",
                    hops.names().join(", ")
                ));
            }
            self.hop_values.insert(value.to_string(), hop.to_string());
        }
        Ok(())
    }

    /// Whether our field at `index` is read from where the mapping says, not from its own
    /// spellings (it is mapped, or a derived key fills it).
    fn claims(&self, index: usize) -> bool {
        self.entries.iter().any(|e| match e.target {
            Target::Field(i) => i == index,
            Target::Derived(Derived::RetryCount) => FIELDS[index].name() == "attempt",
            Target::Derived(Derived::Duration(_)) => false,
        })
    }

    /// The columns (or flat keys) a flat input must have for this mapping, and where each
    /// goes: our unclaimed fields by their own spellings, then each mapped key.
    pub fn columns(&self) -> Vec<(String, Column)> {
        let mut columns = Vec::new();
        for (index, field) in FIELDS.iter().enumerate() {
            if !self.claims(index) {
                for spelling in field.spellings {
                    columns.push((spelling.to_string(), Column::Own(index)));
                }
            }
        }
        for (n, entry) in self.entries.iter().enumerate() {
            if let Some(path) = &entry.path {
                columns.push((path.flat(), Column::Mapped(n)));
            }
        }
        columns
    }

    /// Our key a column fills.
    pub fn key_of(&self, column: Column) -> &'static str {
        match column {
            Column::Own(i) => FIELDS[i].name(),
            Column::Mapped(n) => match self.entries[n].target {
                Target::Field(i) => FIELDS[i].name(),
                Target::Derived(_) => self.entries[n].ours,
            },
        }
    }

    /// Where the mapping reads our key `ours` from, as messages say it: `is read from
    /// "request_id" (--field)`; `None` when it is not mapped.
    pub fn source_of(&self, ours: &str) -> Option<String> {
        self.entries
            .iter()
            .find(|e| e.ours == ours)
            .map(Entry::source)
    }

    /// Reads one line's object: our unclaimed keys by their spellings, the mapped ones
    /// where the mapping says.
    pub fn read_object(&self, object: &Map<String, Value>) -> Result<Row<'static>, String> {
        let mut row = self.row();
        let mut seen = [false; FIELDS.len()];
        for (key, value) in object {
            let Some(index) = field_index(key) else {
                continue;
            };
            if self.claims(index) {
                continue;
            }
            // A log read under a mapping has its own nested objects, and one may have the
            // name of a key of ours (ECS's `event` object, with `event.duration` in it): it
            // is the log's, not ours, and is not read as ours.
            if value.is_object() || value.is_array() {
                continue;
            }
            if std::mem::replace(&mut seen[index], true) {
                return Err(format!("duplicate field `{}`", FIELDS[index].name()));
            }
            let value = scalar(value)
                .map_err(|what| format!("{key} must be a string, number or boolean, got {what}"))?;
            row.fields.set(index, value);
        }
        for (n, entry) in self.entries.iter().enumerate() {
            let Some(path) = &entry.path else { continue };
            row.mapped[n] = match path.find(object) {
                Some(value) => scalar(value).map_err(|what| {
                    format!(
                        "{} (read from \"{}\") is {what}: map a key inside it, e.g. {}.name",
                        entry.ours, path.written, path.written
                    )
                })?,
                None => None,
            };
        }
        Ok(row)
    }

    /// An empty row for this mapping, to fill cell by cell (Parquet).
    pub fn row<'a>(&self) -> Row<'a> {
        Row {
            fields: RawFields::default(),
            mapped: vec![None; self.entries.len()],
        }
    }

    /// Turns a filled row into a validated line: the mapped keys into their fields, hop
    /// values, attempt base, time unit and durations applied, then the one validation
    /// every line goes through. Every error names our key and the log's.
    pub fn check<'a>(&self, row: Row<'a>, hops: &HopOrder) -> Result<CheckedLine<'a>, String> {
        self.convert(row)
            .and_then(|fields| fields.check(hops).map_err(|e| self.explain(e)))
    }

    fn convert<'a>(&self, row: Row<'a>) -> Result<RawFields<'a>, String> {
        let Row { mut fields, mapped } = row;
        let mut retry_count = None;
        let mut duration = None;
        for (entry, value) in self.entries.iter().zip(mapped) {
            let Some(value) = value else { continue };
            match entry.target {
                Target::Field(i) => fields.set(i, Some(value)),
                Target::Derived(Derived::RetryCount) => retry_count = Some((entry, value)),
                Target::Derived(Derived::Duration(unit)) => duration = Some((entry, unit, value)),
            }
        }
        if let Some(Scalar::Str(name)) = &fields.hop {
            if let Some(ours) = self.hop_values.get(name.as_ref()) {
                fields.hop = Some(Scalar::Str(Cow::Owned(ours.clone())));
            }
        }
        if self.attempt_base == 0 {
            if let Some(v) = fields.attempt.take() {
                let name = self.name_of("attempt");
                fields.attempt = Some(count_plus_one(
                    &name,
                    v,
                    "0 = the original, as --attempt-base 0 says",
                )?);
            }
        }
        if let Some((entry, v)) = retry_count {
            let name = entry.describe();
            fields.attempt = Some(count_plus_one(&name, v, "0 = the original attempt")?);
        }
        if self.time_unit != TimeUnit::Ms {
            for key in TIME_KEYS {
                let slot = (FIELDS[field_index(key).expect("a key of FIELDS")].slot)(&mut fields);
                if let Some(ms) = slot.as_ref().and_then(numeric) {
                    *slot = Some(Scalar::Float(self.time_unit.to_ms(ms)));
                }
            }
        }
        if let Some((entry, unit, v)) = duration {
            self.apply_duration(&mut fields, entry, unit, v)?;
        }
        Ok(fields)
    }

    /// A duration makes the missing end of an attempt record from the end it has.
    fn apply_duration(
        &self,
        fields: &mut RawFields,
        entry: &Entry,
        unit: Option<TimeUnit>,
        v: Scalar,
    ) -> Result<(), String> {
        let name = entry.describe();
        let d = duration_ms(&name, &v, unit.unwrap_or(self.time_unit), unit.is_none())?;
        if fields.event.is_some() {
            return Err(format!(
                "{name}: a point event (\"event\") has one time and no duration; map the duration away ({}=-) for point events",
                entry.ours
            ));
        }
        let start = time_of(
            fields.start_ms.take(),
            fields.start.take(),
            ("start_ms", "start"),
        )
        .map_err(|e| self.explain(e))?;
        let finish = time_of(
            fields.finish_ms.take(),
            fields.finish.take(),
            ("finish_ms", "finish"),
        )
        .map_err(|e| self.explain(e))?;
        let (start, finish) = match (start, finish) {
            (Some(s), None) => (s, s + d),
            (None, Some(f)) if f >= d => (f - d, f),
            (None, Some(f)) => {
                return Err(format!(
                    "{name}: the duration ({d} ms) is longer than the time since 0 of the finish ({f} ms)"
                ))
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{name}: the line has a start, a finish and a duration; map either the finish or the duration away (finish=- or {}=-)",
                    entry.ours
                ))
            }
            (None, None) => {
                return Err(format!(
                    "{name}: a duration needs the start (start or start_ms) or the finish of the attempt; map one of them"
                ))
            }
        };
        fields.start_ms = Some(Scalar::Float(start));
        fields.finish_ms = Some(Scalar::Float(finish));
        Ok(())
    }

    /// Our key as messages name it: with the log's key when it is mapped.
    fn name_of(&self, ours: &str) -> String {
        match self.entries.iter().find(|e| e.ours == ours) {
            Some(entry) => entry.describe(),
            None => ours.to_string(),
        }
    }

    /// Adds to a validation message where each of our keys it names was read from.
    fn explain(&self, message: String) -> String {
        let mut notes: Vec<String> = self
            .entries
            .iter()
            .filter(|e| names_word(&message, e.ours))
            .map(|e| format!("{} {}", e.ours, e.source()))
            .collect();
        if message.starts_with("unknown hop") {
            notes.push("or map the log's hop names onto ours with --hop-value VALUE=HOP (or [hop_values] in the policy)".into());
        }
        if notes.is_empty() {
            message
        } else {
            format!("{message}; {}", notes.join("; "))
        }
    }
}

impl Entry {
    /// `is read from "request_id" (--field)`, or that the log has none.
    fn source(&self) -> String {
        match &self.path {
            Some(path) => format!("is read from \"{}\" ({})", path.written, self.origin),
            None => format!("is mapped to '-' ({}): the log has none", self.origin),
        }
    }

    /// The log's key as the user wrote it, or `-` for none.
    fn written(&self) -> &str {
        self.path.as_ref().map_or("-", |p| p.written.as_str())
    }

    /// `retry_count ("retries")`: our key and where it was read.
    fn describe(&self) -> String {
        match &self.path {
            Some(path) => format!("{} (read from \"{}\")", self.ours, path.written),
            None => self.ours.to_string(),
        }
    }
}

/// Where a column of a flat input goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// Our field at this index of [`FIELDS`], by one of its own spellings.
    Own(usize),
    /// The mapping's `n`th key.
    Mapped(usize),
}

/// One line or row as read under a mapping, before [`KeyMapping::check`].
#[derive(Debug)]
pub struct Row<'a> {
    pub fields: RawFields<'a>,
    /// The value of each mapped key, in the mapping's order.
    pub mapped: Vec<Option<Scalar<'a>>>,
}

impl<'a> Row<'a> {
    /// A row with no mapping: our keys by their own spellings.
    pub fn plain() -> Row<'a> {
        Row {
            fields: RawFields::default(),
            mapped: Vec::new(),
        }
    }

    /// Puts a cell of a flat input where `column` says; `Err` when our field already has a
    /// value from another spelling (a duplicate, as on a plain line).
    pub fn set(&mut self, column: Column, value: Scalar<'a>) -> Result<(), String> {
        let slot = match column {
            Column::Own(i) => (FIELDS[i].slot)(&mut self.fields),
            Column::Mapped(n) => &mut self.mapped[n],
        };
        if slot.is_some() {
            if let Column::Own(i) = column {
                return Err(format!(
                    "duplicate field `{}`: two of its spellings hold a value in this row",
                    FIELDS[i].name()
                ));
            }
        }
        *slot = Some(value);
        Ok(())
    }
}

/// A JSON value as a [`Scalar`] (`None` for null), or what it is instead.
fn scalar(value: &Value) -> Result<Option<Scalar<'static>>, &'static str> {
    Ok(Some(match value {
        Value::Null => return Ok(None),
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Scalar::Int(i),
            // Kept as text, as `Scalar`'s reader does: an ID above i64 must read exactly.
            (None, Some(u)) => Scalar::Str(Cow::Owned(u.to_string())),
            (None, None) => Scalar::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Scalar::Str(Cow::Owned(s.clone())),
        Value::Array(_) => return Err("an array"),
        Value::Object(_) => return Err("an object"),
    }))
}

/// A number, or a string that is one (the forms a time in ms may take).
fn numeric(v: &Scalar) -> Option<f64> {
    match v {
        Scalar::Int(i) => Some(*i as f64),
        Scalar::Float(f) => Some(*f),
        Scalar::Str(s) => s.trim().parse().ok(),
        Scalar::Bool(_) => None,
    }
    .filter(|n: &f64| n.is_finite())
}

/// A count from 0 (a 0-based attempt number, a retry count) as our attempt number.
fn count_plus_one(name: &str, v: Scalar, meaning: &str) -> Result<Scalar<'static>, String> {
    match numeric(&v) {
        Some(n) if n.fract() == 0.0 && (0.0..u32::MAX as f64).contains(&n) => {
            Ok(Scalar::Int(n as i64 + 1))
        }
        _ => Err(format!(
            "{name} must be a whole number of at least 0 ({meaning}), got {}",
            v.describe()
        )),
    }
}

/// A duration in ms: a number in `unit`, an ISO 8601 duration (`PT0.045S`, see
/// [`duration`]), or (when `written_unit`) a string with its unit (`250ms`, `1.5s`, `830µs`).
fn duration_ms(
    name: &str,
    v: &Scalar,
    unit: TimeUnit,
    written_unit: bool,
) -> Result<Millis, String> {
    let bad = || {
        format!(
            "{name} must be a duration of at least 0, a number{}, got {}",
            if written_unit {
                format!(
                    " in {} or with its unit ({}), e.g. 250ms",
                    unit.name(),
                    TimeUnit::all_names()
                )
            } else {
                format!(" of {}", unit.name())
            },
            v.describe()
        )
    };
    let ms = match numeric(v) {
        Some(n) => unit.to_ms(n),
        None => match v {
            // ISO 8601 (`PT0.045S`) only for a string starting with P: numbers take the
            // path above, untouched, and `250ms` the unit path below.
            Scalar::Str(s) if duration::is_iso8601(s) => {
                duration::iso8601_ms(s).map_err(|why| format!("{name}: {why}"))?
            }
            Scalar::Str(s) if written_unit => {
                let s = s.trim();
                let split = s
                    .find(|c: char| {
                        !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
                    })
                    .ok_or_else(bad)?;
                let n: f64 = s[..split].parse().map_err(|_| bad())?;
                let unit = TimeUnit::parse(s[split..].trim()).ok_or_else(bad)?;
                unit.to_ms(n)
            }
            _ => return Err(bad()),
        },
    };
    if !(0.0..=fields::MAX_DURATION_MS).contains(&ms) {
        return Err(bad());
    }
    Ok(ms + 0.0)
}

/// The one time of an attempt's end given in ms or as RFC 3339 (the ms key wins, as on a
/// plain line).
fn time_of(
    ms: Option<Scalar>,
    rfc: Option<Scalar>,
    keys: (&str, &str),
) -> Result<Option<Millis>, String> {
    match (ms, rfc) {
        (Some(v), _) => fields::time(keys.0, v).map(Some),
        (None, Some(v)) => fields::time(keys.1, v).map(Some),
        (None, None) => Ok(None),
    }
}

/// Whether `message` has `word` as a whole key name (not inside `start_ms` for `start`).
fn names_word(message: &str, word: &str) -> bool {
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    message.match_indices(word).any(|(i, _)| {
        !message[..i].chars().next_back().is_some_and(is_key_char)
            && !message[i + word.len()..]
                .chars()
                .next()
                .is_some_and(is_key_char)
    })
}

/// Splits `A=B` at its first `=` (our key names have none; the log's paths may).
pub fn split_pair(flag: &str, spec: &str, example: &str) -> Result<(String, String), String> {
    spec.split_once('=')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .ok_or_else(|| format!("{flag} {spec:?}: expected {example}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(pairs: &[(&str, &str)]) -> KeyMapping {
        let mut m = KeyMapping::default();
        m.add_fields(
            "--field",
            pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())),
        )
        .unwrap();
        m
    }

    fn read(m: &KeyMapping, line: &str) -> Result<CheckedLine<'static>, String> {
        let object: Map<String, Value> = serde_json::from_str(line).unwrap();
        m.read_object(&object)
            .and_then(|row| m.check(row, &HopOrder::default()))
    }

    #[test]
    fn paths_parse_dots_brackets_and_positions() {
        let p = KeyPath::parse(r#"attributes["http.route"].x[2]['a\'b']"#).unwrap();
        assert_eq!(
            p.steps,
            vec![
                Step::Key("attributes".into()),
                Step::Key("http.route".into()),
                Step::Key("x".into()),
                Step::Index(2),
                Step::Key("a'b".into()),
            ]
        );
        assert_eq!(
            KeyPath::parse("kubernetes.labels.app").unwrap().flat(),
            "kubernetes.labels.app"
        );
        for bad in ["", "a..b", ".a", "a.", "a[\"b", "a[x]", "a]b", "a[0]b"] {
            assert!(KeyPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nested_and_flat_dotted_keys_are_found() {
        let m = mapping(&[
            ("operation_id", "req.id"),
            ("hop", "kubernetes.labels.app"),
            ("target", r#"attributes["http.route"]"#),
        ]);
        let nested = read(&m, r#"{"req":{"id":"r1"},"kubernetes":{"labels":{"app":"gateway"}},"attributes":{"http.route":"/a"},"start_ms":1}"#).unwrap();
        let flat = read(&m, r#"{"req.id":"r1","kubernetes.labels.app":"gateway","attributes.http.route":"/a","start_ms":1}"#).unwrap();
        assert_eq!(nested, flat);
        assert_eq!(nested.operation_id, "r1");
        assert_eq!(nested.target.as_deref(), Some("/a"));
    }

    #[test]
    fn a_mapped_key_is_not_read_by_its_own_spellings() {
        let m = mapping(&[("operation_id", "request_id"), ("event", "-")]);
        let got = read(
            &m,
            r#"{"request_id":"r","operation":"GET /x","event":"request done","start_ms":1}"#,
        )
        .unwrap();
        assert_eq!(got.operation_id, "r");
    }

    #[test]
    fn units_bases_and_durations_become_ours() {
        let mut m = mapping(&[
            ("retry_count", "retries"),
            ("start_ms", "ts"),
            ("duration", "took"),
        ]);
        m.time_unit = TimeUnit::S;
        let got = read(
            &m,
            r#"{"operation_id":"o","retries":1,"ts":1700000000.5,"took":"250ms"}"#,
        )
        .unwrap();
        assert_eq!(got.attempt, Some(2));
        assert_eq!(
            got.timing,
            crate::model::Timing::Record {
                start_ms: Some(1_700_000_000_500.0),
                finish_ms: Some(1_700_000_000_750.0)
            }
        );
        // A bare duration is in the time unit; duration_us says its own.
        let got = read(&m, r#"{"operation_id":"o","ts":10,"took":0.5}"#).unwrap();
        assert_eq!(
            got.timing,
            crate::model::Timing::Record {
                start_ms: Some(10_000.0),
                finish_ms: Some(10_500.0)
            }
        );
        let m = mapping(&[("finish", "end"), ("duration_us", "us")]);
        let got = read(
            &m,
            r#"{"operation_id":"o","end":"1970-01-01T00:00:01Z","us":2500}"#,
        )
        .unwrap();
        assert_eq!(
            got.timing,
            crate::model::Timing::Record {
                start_ms: Some(997.5),
                finish_ms: Some(1000.0)
            }
        );
        let m = KeyMapping {
            attempt_base: 0,
            ..KeyMapping::default()
        };
        assert_eq!(
            read(&m, r#"{"operation_id":"o","attempt":0,"start_ms":1}"#)
                .unwrap()
                .attempt,
            Some(1)
        );
    }

    #[test]
    fn errors_name_our_key_and_the_logs() {
        let m = mapping(&[
            ("operation_id", "request_id"),
            ("retry_count", "retries"),
            ("duration_ms", "elapsed"),
        ]);
        let cases = [
            (r#"{"start_ms":1}"#, "missing operation_id"),
            (
                r#"{"start_ms":1}"#,
                "operation_id is read from \"request_id\" (--field)",
            ),
            (
                r#"{"request_id":"o","start_ms":1,"retries":-1}"#,
                "retry_count (read from \"retries\") must be a whole number of at least 0",
            ),
            (
                r#"{"request_id":"o","start_ms":1,"elapsed":"x"}"#,
                "duration_ms (read from \"elapsed\") must be a duration",
            ),
            (r#"{"request_id":"o","elapsed":5}"#, "needs the start"),
            (
                r#"{"request_id":{"a":1},"start_ms":1}"#,
                "operation_id (read from \"request_id\") is an object",
            ),
            (
                r#"{"request_id":"o","start_ms":1,"hop":"checkout-api"}"#,
                "--hop-value",
            ),
        ];
        for (line, expected) in cases {
            let err = read(&m, line).expect_err(line);
            assert!(err.contains(expected), "{line}: {err}");
        }
    }

    #[test]
    fn hop_values_name_our_hops() {
        let mut m = KeyMapping::default();
        m.add_hop_values(
            "--hop-value",
            [("checkout-api".to_string(), "gateway".to_string())],
            &HopOrder::default(),
        )
        .unwrap();
        let got = read(
            &m,
            r#"{"operation_id":"o","hop":"checkout-api","start_ms":1}"#,
        )
        .unwrap();
        assert_eq!(got.hop, HopOrder::default().index_of("gateway").unwrap());
        let err = m
            .add_hop_values(
                "--hop-value",
                [("x".to_string(), "edge".to_string())],
                &HopOrder::default(),
            )
            .unwrap_err();
        assert!(err.contains("unknown hop"), "{err}");
    }

    #[test]
    fn the_flags_replace_what_the_policy_says_of_the_same_thing() {
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let mut m = KeyMapping::default();
        m.add_fields(
            "policy [fields]",
            pairs(&[("attempt", "n"), ("operation_id", "a")]),
        )
        .unwrap();
        m.add_fields(
            "--field",
            pairs(&[("retry_count", "r"), ("operation_id", "b")]),
        )
        .unwrap();
        let got = read(&m, r#"{"a":"x","b":"o","n":7,"r":0,"start_ms":1}"#).unwrap();
        assert_eq!((got.operation_id.as_ref(), got.attempt), ("o", Some(1)));
    }

    #[test]
    fn bad_mappings_are_refused_naming_the_key() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (&[("opid", "x")], "\"opid\" is not one of our keys"),
            (&[("operation_id", "")], "operation_id needs the log's key"),
            (
                &[("attempt", "a"), ("retry_count", "r")],
                "attempt and retry_count both give the attempt",
            ),
            (
                &[("duration", "a"), ("duration_ms", "r")],
                "both give the duration",
            ),
            (&[("hop", "a..b")], "hop: \"a..b\": an empty key"),
        ];
        for (pairs, expected) in cases {
            let mut m = KeyMapping::default();
            let err = m
                .add_fields(
                    "--field",
                    pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())),
                )
                .unwrap_err();
            assert!(err.contains(expected), "{pairs:?}: {err}");
        }
    }
}
