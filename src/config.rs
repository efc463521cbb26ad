//! The resolved, validated configuration of each subcommand: what the CLI asked for, in
//! the terms the pipeline uses, and the one place that resolves it from the flags and the
//! policy file. Nothing below this module sees clap types, and nothing below the commands
//! imports this module: each part is a type of the layer that uses it (the rules, the
//! input settings, the output format, the gate's conditions).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::{AnalyzeArgs, FormatArg, InputArgs, InputFormatArg, ShowArgs};
use crate::diagnostics::BadInputPolicy;
use crate::gate::condition::{Condition, Origin};
use crate::ingest::spans::mapping::SpanMapping;
use crate::ingest::{
    split_pair, InputConfig, InputFormat, InputPath, KeyMapping, Preset, TimeUnit,
};
use crate::report::{OutputFormat, Style};
use crate::rules::{HopOrder, Rules};
use crate::{cli, compare, gate, ingest, partial, policy, rules};

/// Where an output goes: standard output (no flag, or `-`), or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputTarget {
    Stdout,
    File(PathBuf),
}

impl OutputTarget {
    /// `--output`, `--junit`, `--expected`: `-` is standard output, everywhere.
    pub fn from_flag(path: PathBuf) -> OutputTarget {
        if path.as_os_str() == "-" {
            OutputTarget::Stdout
        } else {
            OutputTarget::File(path)
        }
    }

    /// An optional output flag whose absence means standard output.
    pub fn stdout_unless(path: Option<PathBuf>) -> OutputTarget {
        path.map_or(OutputTarget::Stdout, OutputTarget::from_flag)
    }

    pub fn display(&self) -> String {
        match self {
            OutputTarget::Stdout => "<stdout>".to_string(),
            OutputTarget::File(p) => p.display().to_string(),
        }
    }
}

/// The resolved configuration of `analyze`.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeConfig {
    pub input: InputConfig,
    pub rules: Rules,
    pub format: OutputFormat,
    pub output: OutputTarget,
    /// How the table format is drawn.
    pub style: Style,
    /// Colour the gate's verdict lines on stderr.
    pub stderr_color: bool,
    /// How many of the worst operations the summary lists.
    pub top: usize,
    pub gate: GateConfig,
}

/// The resolved configuration of `show`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowConfig {
    pub input: InputConfig,
    pub rules: Rules,
    pub style: Style,
    /// `None`: the input's only operation (`show trace.json`).
    pub operation_id: Option<String>,
    pub test_run_id: Option<String>,
}

/// The CI gate's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GateConfig {
    pub conditions: Vec<Condition>,
    pub report_only: bool,
    /// `--allow-empty`: conditions over zero operations pass instead of exiting 2.
    pub allow_empty: bool,
    /// `--junit`: where the JUnit XML goes, when asked for.
    pub junit: Option<OutputTarget>,
}

/// `--color`: `always` and `never` as said; `auto` colours a terminal unless `NO_COLOR` is
/// set to anything but the empty string, and colours anything when `CLICOLOR_FORCE` is set
/// to anything but `0` (NO_COLOR wins: it is the user's own refusal).
pub fn wants_color(
    choice: cli::ColorArg,
    terminal: bool,
    no_color: Option<std::ffi::OsString>,
    clicolor_force: Option<std::ffi::OsString>,
) -> bool {
    let refused = no_color.is_some_and(|v| !v.is_empty());
    let forced = clicolor_force.is_some_and(|v| !v.is_empty() && v != "0");
    match choice {
        cli::ColorArg::Always => true,
        cli::ColorArg::Never => false,
        cli::ColorArg::Auto => !refused && (forced || terminal),
    }
}

pub fn color_for(choice: cli::ColorArg, terminal: bool) -> bool {
    wants_color(
        choice,
        terminal,
        std::env::var_os("NO_COLOR"),
        std::env::var_os("CLICOLOR_FORCE"),
    )
}

/// The terminal reports' style for output to `target`: fitted to the terminal's width and
/// coloured only when that output is the terminal.
pub fn style(args: &cli::StyleArgs, target: &OutputTarget) -> Style {
    let terminal = *target == OutputTarget::Stdout && std::io::stdout().is_terminal();
    Style {
        width: if terminal {
            terminal_size::terminal_size_of(std::io::stdout())
                .map(|(terminal_size::Width(w), _)| usize::from(w))
        } else {
            None
        },
        color: color_for(args.color, terminal),
        ascii: args.ascii,
    }
}

/// The inputs named on the command line: `-` is standard input, and so is no input at all.
pub fn input_paths(files: Vec<std::path::PathBuf>) -> Vec<InputPath> {
    let mut paths: Vec<InputPath> = files
        .into_iter()
        .map(|p| {
            if p.as_os_str() == "-" {
                InputPath::Stdin
            } else {
                InputPath::File(p)
            }
        })
        .collect();
    if paths.is_empty() {
        paths.push(InputPath::Stdin);
    }
    paths
}

pub fn input_config(
    args: InputArgs,
    rules: &Rules,
    policy: &policy::Policy,
) -> Result<InputConfig> {
    let InputArgs {
        files,
        options: args,
    } = args;
    let paths = input_paths(files);
    let mut spans = SpanMapping::new(&rules.hops, rules.queue_hops.clone());
    let from_policy: Vec<String> = policy
        .hop_map
        .iter()
        .map(|(service, hop)| format!("{service}={hop}"))
        .collect();
    spans.add_hop_rules("policy [hop_map]", &from_policy, &rules.hops)?;
    spans.add_hop_rules("--hop-map", &args.hop_map, &rules.hops)?;
    for (flag, value) in [
        ("--operation-attribute", &args.operation_attribute),
        ("--run-attribute", &args.run_attribute),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            anyhow::bail!(
                "{flag} needs an attribute name, e.g. {flag} http.request.header.idempotency-key"
            );
        }
    }
    let mapping = key_mapping(&args, rules, policy)?;
    let presets = presets(&args.preset)?;
    spans.operation_attribute = args.operation_attribute;
    if let Some(run) = args.run_attribute {
        spans.run_attribute = run;
    }
    Ok(InputConfig {
        paths,
        format: match args.input_format {
            InputFormatArg::Auto => InputFormat::Auto,
            InputFormatArg::Jsonl => InputFormat::Jsonl,
            InputFormatArg::Logfmt => InputFormat::Logfmt,
            InputFormatArg::Otlp => InputFormat::Otlp,
            InputFormatArg::Zipkin => InputFormat::Zipkin,
            InputFormatArg::Jaeger => InputFormat::Jaeger,
        },
        bad_input: if args.strict {
            BadInputPolicy::Strict
        } else if args.skip_invalid {
            BadInputPolicy::Skip
        } else {
            BadInputPolicy::Report
        },
        progress: ingest::progress::wanted(),
        max_line_bytes: args.max_line_bytes,
        spans,
        mapping,
        presets,
        // `analyze --partition` sets it; every other command reads every operation.
        partition: None,
        // `analyze` sets it; every other command holds every event.
        budget: None,
    })
}

/// The `--preset`s, each once. Envoy's and Istio's logs look alike (both are access logs), so
/// one run reads access logs with one of them.
pub fn presets(given: &[Preset]) -> Result<Vec<Preset>> {
    let mut presets: Vec<Preset> = Vec::new();
    for &p in given {
        if !presets.contains(&p) {
            presets.push(p);
        }
    }
    if presets.contains(&Preset::Envoy) && presets.contains(&Preset::Istio) {
        anyhow::bail!(
            "--preset envoy and --preset istio both read access logs and cannot tell them apart: give one (istio reads each inbound line as one attempt; envoy reads the attempt count of each line)"
        );
    }
    Ok(presets)
}

/// The input's key mapping: the policy's, then the flags'; `None` when there is none, so
/// that lines take the plain path.
pub fn key_mapping(
    args: &cli::InputOptions,
    rules: &Rules,
    policy: &policy::Policy,
) -> Result<Option<KeyMapping>> {
    let mut mapping = KeyMapping::default();
    mapping
        .add_fields("policy [fields]", policy.fields.clone())
        .map_err(anyhow::Error::msg)?;
    let fields = args
        .fields
        .iter()
        .map(|spec| {
            split_pair(
                "--field",
                spec,
                "OUR=THEIRS, e.g. --field operation_id=request_id",
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    mapping
        .add_fields("--field", fields)
        .map_err(anyhow::Error::msg)?;
    mapping
        .add_hop_values(
            "policy [hop_values]",
            policy.hop_values.clone(),
            &rules.hops,
        )
        .map_err(anyhow::Error::msg)?;
    let hop_values = args
        .hop_values
        .iter()
        .map(|spec| {
            spec.rsplit_once('=')
                .map(|(value, hop)| (value.to_string(), hop.to_string()))
                .with_context(|| {
                    format!("--hop-value {spec:?}: expected VALUE=HOP, e.g. --hop-value checkout-api=caller")
                })
        })
        .collect::<Result<Vec<_>>>()?;
    mapping
        .add_hop_values("--hop-value", hop_values, &rules.hops)
        .map_err(anyhow::Error::msg)?;
    mapping.attempt_base = args.attempt_base.or(policy.attempt_base).unwrap_or(1);
    if let Some(unit) = args.time_unit.as_deref().or(policy.time_unit.as_deref()) {
        mapping.time_unit = TimeUnit::parse(unit).with_context(|| {
            format!(
                "--time-unit {unit:?}: use one of {}, e.g. --time-unit s for epoch seconds",
                TimeUnit::all_names()
            )
        })?;
    }
    Ok((!mapping.is_plain()).then_some(mapping))
}

/// Parquet is binary: it goes to a file, or to stdout only when asked for with `-o -` and
/// stdout is not a terminal.
pub fn check_parquet_output(output: Option<&Path>) -> Result<()> {
    match output {
        None => anyhow::bail!(
            "--format parquet writes a binary file: add --output FILE, e.g. --output operations.parquet"
        ),
        Some(p) if p == Path::new("-") && std::io::stdout().is_terminal() => anyhow::bail!(
            "--format parquet will not write binary data to a terminal: use --output FILE, e.g. --output operations.parquet"
        ),
        Some(_) => Ok(()),
    }
}

/// The hop order and queue hops: defaults, then the policy file, then `--hops`.
pub fn base_rules(
    input: &cli::InputOptions,
    policy: &policy::Policy,
    policy_path: Option<&Path>,
) -> Result<Rules> {
    let hop_names = match (&input.hops, &policy.hops) {
        (Some(flag), _) => flag.clone(),
        (None, Some(from_policy)) => from_policy.clone(),
        (None, None) => rules::DEFAULT_HOPS.iter().map(|s| s.to_string()).collect(),
    };
    let mut rules = Rules::new(HopOrder::new(hop_names)?);
    // Checked here, before the policy's values are applied, so that a policy error names
    // the policy and its key, not the flag the value would otherwise have come from.
    if let Some(path) = policy_path {
        policy
            .check_hops(&rules.hops)
            .with_context(|| format!("invalid policy '{}'", path.display()))?;
    }
    if let Some(queues) = &policy.queue_hops {
        rules.queue_hops = rules.hop_flags("policy queue_hops", queues)?;
    }
    Ok(rules)
}

/// Resolves the rules: defaults, then the policy file, then flags.
pub fn resolve_rules(args: &AnalyzeArgs, policy: &policy::Policy) -> Result<Rules> {
    let mut rules = base_rules(&args.input.options, policy, args.rules.policy.as_deref())?;
    apply_policy_rules(&mut rules, policy)?;
    rules.set_budgets(&args.rules.budget)?;
    rules.set_deadlines("--deadline", &args.rules.deadline)?;
    for (h, allowed) in rules
        .hop_flags("--allow-overlap", &args.rules.allow_overlap)?
        .into_iter()
        .enumerate()
    {
        rules.overlap_allowed[h] |= allowed;
    }
    let window = args.rules.burst_window.unwrap_or(rules.burst.window_ms);
    let min_ops = args.rules.burst_min_ops.unwrap_or(rules.burst.min_ops);
    if !rules::duration_is_valid(window) {
        anyhow::bail!(
            "--burst-window must be a positive number of milliseconds, e.g. --burst-window 50"
        );
    }
    if min_ops < rules::FEWEST_BURST_OPS {
        anyhow::bail!("--burst-min-ops must be at least {} (a burst spans several operations), e.g. --burst-min-ops 5", rules::FEWEST_BURST_OPS);
    }
    rules.burst.window_ms = window;
    rules.burst.min_ops = min_ops;
    Ok(rules)
}

/// The policy file's budgets (and inner budgets), deadlines, hops allowed to overlap, layer
/// inference, retryable statuses and burst parameters, over
/// `rules` (whose hop order and queue hops are already set).
pub fn apply_policy_rules(rules: &mut Rules, policy: &policy::Policy) -> Result<()> {
    let policy_budgets: Vec<String> = policy
        .budgets
        .iter()
        .map(|(hop, n)| format!("{hop}={n}"))
        .collect();
    rules
        .set_budgets(&policy_budgets)
        .context("in the policy's [budgets]")?;
    let policy_deadlines: Vec<String> = policy
        .deadlines
        .iter()
        .map(|(hop, ms)| format!("{hop}={ms}"))
        .collect();
    rules.set_deadlines("policy [deadlines]", &policy_deadlines)?;
    for (h, allowed) in rules
        .hop_flags("--allow-overlap", &policy.allow_overlap)?
        .into_iter()
        .enumerate()
    {
        rules.overlap_allowed[h] |= allowed;
    }
    for (hop, &n) in &policy.inner_budgets {
        let index = rules.hop_for_flag("policy [inner_budgets]", hop)?;
        rules.inner_budgets[index as usize] = Some(n);
    }
    if let Some(infer) = policy.infer_layers {
        rules.infer_layers = infer;
    }
    if let Some(statuses) = &policy.retryable.statuses {
        rules.retryable_4xx.clone_from(statuses);
        rules.retryable_4xx.sort_unstable();
        rules.retryable_4xx.dedup();
    }
    if let Some(window) = policy.burst.window_ms {
        rules.burst.window_ms = window;
    }
    if let Some(min_ops) = policy.burst.min_ops {
        rules.burst.min_ops = min_ops;
    }
    Ok(())
}

pub fn analyze_config(args: AnalyzeArgs) -> Result<AnalyzeConfig> {
    let policy = match &args.rules.policy {
        Some(path) => policy::load(path)?,
        None => policy::Policy::default(),
    };
    let rules = resolve_rules(&args, &policy)?;
    let policy_path = args.rules.policy.clone();
    analyze_config_with(args, &policy, policy_path.as_deref(), rules)
}

/// [`analyze_config`] with the policy read and the rules resolved.
pub fn analyze_config_with(
    args: AnalyzeArgs,
    policy: &policy::Policy,
    policy_path: Option<&Path>,
    rules: Rules,
) -> Result<AnalyzeConfig> {
    let AnalyzeArgs {
        input,
        partition,
        report,
        ..
    } = args;
    let parse_all = |texts: &[String], origin| -> Result<Vec<Condition>> {
        texts
            .iter()
            .map(|t| gate::condition::parse_condition(t, &rules.hops, origin))
            .collect()
    };
    let from_policy = parse_all(&policy.fail_on, Origin::Policy).with_context(|| {
        let path = policy_path.unwrap_or(Path::new("-"));
        format!("invalid policy '{}': fail_on", path.display())
    })?;
    let from_flags = parse_all(&report.fail_on, Origin::Flag).context("in --fail-on")?;
    if matches!(report.format, FormatArg::Parquet) {
        check_parquet_output(report.output.as_deref())?;
    }
    let output = OutputTarget::stdout_unless(report.output);
    let junit = report.junit.map(OutputTarget::from_flag);
    if output == OutputTarget::Stdout && junit == Some(OutputTarget::Stdout) {
        anyhow::bail!(
            "--junit - and the report would both go to standard output: give the report --output FILE, e.g. --junit - --output report.txt"
        );
    }
    let style = style(&report.style, &output);
    let mut input = input_config(input, &rules, policy)?;
    input.partition = partition;
    Ok(AnalyzeConfig {
        stderr_color: color_for(report.style.color, std::io::stderr().is_terminal()),
        style,
        input,
        format: match report.format {
            FormatArg::Table => OutputFormat::Table,
            FormatArg::Json => OutputFormat::Json,
            FormatArg::Jsonl => OutputFormat::Jsonl,
            FormatArg::Csv => OutputFormat::Csv,
            FormatArg::Markdown => OutputFormat::Markdown,
            FormatArg::Parquet => OutputFormat::Parquet,
            FormatArg::Html => OutputFormat::Html,
            FormatArg::Partial => OutputFormat::Partial,
        },
        output,
        top: report.top,
        gate: GateConfig {
            conditions: gate::condition::merge(from_policy, from_flags),
            report_only: report.report_only,
            allow_empty: report.allow_empty,
            junit,
        },
        rules,
    })
}

/// `show` resolves its rules exactly as `analyze` does, from the same flags and policy.
pub fn show_config(mut args: ShowArgs) -> Result<ShowConfig> {
    // `show trace.json`: a lone argument that names a file is the input, not an operation.
    // (`show ID -` reads an operation from stdin even where a file is named like it.)
    let operation_id = if args.input.files.is_empty() && Path::new(&args.operation_id).exists() {
        args.input.files.push(args.operation_id.into());
        None
    } else {
        Some(args.operation_id)
    };
    let resolved = analyze_config(AnalyzeArgs {
        input: args.input,
        rules: args.rules,
        partition: None,
        report: cli::ReportArgs {
            format: FormatArg::Table,
            output: None,
            fail_on: Vec::new(),
            report_only: false,
            allow_empty: false,
            junit: None,
            top: 0,
            style: args.style,
        },
    })?;
    Ok(ShowConfig {
        input: resolved.input,
        rules: resolved.rules,
        style: resolved.style,
        operation_id,
        test_run_id: args.run,
    })
}

/// Splits `--fail-on` texts into change conditions (parsed here) and plain ones (left for
/// [`analyze_config`]).
pub fn change_conditions(
    fail_on: &mut Vec<String>,
    hops: &HopOrder,
) -> Result<Vec<compare::change::ChangeCondition>> {
    let (changes, plain): (Vec<String>, Vec<String>) = std::mem::take(fail_on)
        .into_iter()
        .partition(|t| compare::change::is_change(t));
    *fail_on = plain;
    changes
        .iter()
        .map(|t| compare::change::parse(t, hops, Origin::Flag))
        .collect::<Result<Vec<_>>>()
        .context("in --fail-on")
}

/// The hop order the flags and policy give, before anything else is resolved: change
/// conditions are parsed against it.
pub fn hops_for(args: &AnalyzeArgs) -> Result<HopOrder> {
    let policy = match &args.rules.policy {
        Some(path) => policy::load(path)?,
        None => policy::Policy::default(),
    };
    Ok(base_rules(&args.input.options, &policy, args.rules.policy.as_deref())?.hops)
}

/// A policy given to `merge` may not change a rule the partials were made under: applied
/// over their rules, it must leave every setting as it was.
pub fn check_policy_rules(
    rules: &Rules,
    policy: &policy::Policy,
    path: &Path,
    partial: &str,
) -> Result<()> {
    let invalid = || format!("invalid policy '{}'", path.display());
    let mut applied = rules.clone();
    if let Some(hops) = &policy.hops {
        applied.hops = HopOrder::new(hops.clone()).with_context(invalid)?;
    }
    if applied.hops == rules.hops {
        policy.check_hops(&rules.hops).with_context(invalid)?;
        if let Some(queues) = &policy.queue_hops {
            applied.queue_hops = rules.hop_flags("policy queue_hops", queues)?;
        }
        apply_policy_rules(&mut applied, policy)?;
    }
    let ours = partial::RulesFingerprint::of(rules);
    if let Some(difference) = ours.difference(&partial::RulesFingerprint::of(&applied)) {
        anyhow::bail!(
            "the policy '{}' sets other rules than the partials were made with, so the merge would not be the analysis they describe: {difference} (the partials' ('{partial}'), then the policy's); give the partials' analysis the same policy",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cli::ColorArg::{Always, Auto, Never};

    #[test]
    fn color_follows_the_flag_then_no_color_then_clicolor_force_then_the_terminal() {
        let set = |v: &str| Some(std::ffi::OsString::from(v));
        let cases = [
            (Auto, true, None, None, true),
            (Auto, false, None, None, false),
            (Auto, true, set("1"), None, false),
            (Auto, true, set(""), None, true),
            (Auto, false, None, set("1"), true),
            (Auto, false, None, set("0"), false),
            (Auto, false, set("1"), set("1"), false),
            (Always, false, set("1"), None, true),
            (Never, true, None, set("1"), false),
        ];
        for (choice, terminal, no_color, force, expected) in cases {
            assert_eq!(
                wants_color(choice, terminal, no_color.clone(), force.clone()),
                expected,
                "{choice:?} terminal={terminal} NO_COLOR={no_color:?} CLICOLOR_FORCE={force:?}"
            );
        }
    }
}
