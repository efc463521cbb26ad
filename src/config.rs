//! The resolved, validated configuration of each command, and the one place that resolves
//! it: the flags (clap's types, `cli`) and the policy file, read once, become the terms
//! the pipeline uses. Nothing below the commands sees clap types or imports this module:
//! each part of a configuration is a type of the layer that uses it (the rules, the input
//! settings, the output format, the gate's conditions).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::{
    self, AnalyzeArgs, AnalyzeCommand, ConvertArgs, DiffArgs, GenerateArgs, InputArgs,
    InputOptions, MergeArgs, ReplayArgs, ReportArgs, RuleArgs, ShowArgs,
};
use crate::compare::change::ChangeCondition;
use crate::diagnostics::BadInputPolicy;
use crate::gate::condition::{Condition, Origin};
use crate::ingest::spans::mapping::SpanMapping;
use crate::ingest::{split_pair, InputConfig, InputPath, KeyMapping, Preset, TimeUnit};
use crate::policy::{Policy, PolicyFile};
use crate::report::{OutputFormat, Style};
use crate::rules::{HopOrder, Rules};
use crate::{compare, gate, generate, ingest, partial, rules};

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

/// The resolved configuration of a run that reports and may gate: `analyze`, and `merge`,
/// `replay` and `diff` around it.
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

impl AnalyzeConfig {
    /// The files this run writes, each with its flag: checked against its inputs.
    pub fn outputs(&self) -> [(&'static str, Option<&OutputTarget>); 2] {
        [
            ("--output", Some(&self.output)),
            ("--junit", self.gate.junit.as_ref()),
        ]
    }
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

/// The resolved configuration of `replay`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// The observed run's: its input, rules, report and gate (which judges the replayed run).
    pub run: AnalyzeConfig,
    /// The candidate retry policy file.
    pub candidate: PathBuf,
    /// Seed of the candidate's full-jitter draws.
    pub seed: u64,
    /// `--fail-on` conditions on the change from the observed run to the replayed one.
    pub changes: Vec<ChangeCondition>,
}

/// The resolved configuration of `diff`.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffConfig {
    /// How each side is read and analysed (its input paths are each side's), reported and
    /// gated.
    pub run: AnalyzeConfig,
    /// The first run (the baseline): attempt logs or a saved summary.
    pub before: PathBuf,
    /// The second run (the change).
    pub after: PathBuf,
    /// `--fail-on` conditions on the change between the runs.
    pub changes: Vec<ChangeCondition>,
}

/// The resolved configuration of `convert`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertConfig {
    pub input: InputConfig,
    pub hops: HopOrder,
    pub output: OutputTarget,
}

/// The resolved configuration of `generate`.
#[derive(Debug, Clone)]
pub struct GenerateConfig {
    pub options: generate::Options,
    /// Where the events go.
    pub events: OutputTarget,
    /// Where the expected classes go, when asked for.
    pub expected: Option<OutputTarget>,
}

/// `merge`, resolved as far as it can be before the partials are read: their rules
/// decide the rest ([`MergeConfig::with_rules`]).
#[derive(Debug)]
pub struct MergeConfig {
    /// The partials to read.
    pub partials: Vec<InputPath>,
    policy: PolicyFile,
    report: ReportArgs,
}

/// The CI gate's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GateConfig {
    pub conditions: Vec<Condition>,
    pub report_only: bool,
    /// `--allow-empty`: a run over zero operations exits 0 (and its gate passes) instead of 2.
    pub allow_empty: bool,
    /// `--junit`: where the JUnit XML goes, when asked for.
    pub junit: Option<OutputTarget>,
}

/// Where a run that stops on an error writes its JUnit file saying so: resolved before
/// anything else, so that an error in the rest of the configuration is reported there too.
#[derive(Debug, Clone, PartialEq)]
pub struct JunitOnError {
    pub target: OutputTarget,
    pub report_only: bool,
}

/// `--junit` of a run that may stop on an error, if given.
pub fn junit_on_error(report: &ReportArgs) -> Option<JunitOnError> {
    report.junit.clone().map(|path| JunitOnError {
        target: OutputTarget::from_flag(path),
        report_only: report.report_only,
    })
}

/// `analyze`: its run, and the memory budget only it has.
pub fn analyze(args: AnalyzeCommand) -> Result<AnalyzeConfig> {
    let AnalyzeCommand { analyze, memory } = args;
    let budget = ingest::spill::Budget {
        limit_bytes: memory
            .memory_limit
            .unwrap_or(ingest::spill::DEFAULT_MEMORY_LIMIT),
        temp_dir: memory.temp_dir,
    };
    if budget.limit_bytes < memory_floor() {
        anyhow::bail!(
            "--memory-limit of {} bytes: the smallest limit is 64MiB (a run needs that much of its own beside the events it budgets), e.g. --memory-limit 256MiB",
            crate::words::count(budget.limit_bytes)
        );
    }
    if memory.memory_limit.is_some() && analyze.report.format == OutputFormat::Partial {
        anyhow::bail!(
            "--format partial holds its partition's events in memory and does not take --memory-limit: make each partition smaller with --partition K/N"
        );
    }
    let policy = PolicyFile::read(analyze.rules.policy.as_deref())?;
    let base = base_rules(&analyze.input.options, &policy)?;
    let rules = with_flags(base, &analyze.rules, &policy.policy)?;
    let mut config = run_config(analyze, &policy, rules)?;
    config.input.budget = Some(budget);
    Ok(config)
}

/// The environment variable that lowers the smallest `--memory-limit`
/// ([`ingest::spill::MIN_MEMORY_LIMIT`]; a size, as the flag takes): the tests spill
/// inputs of a few kilobytes through the same path as gigabytes. Below the default floor,
/// the process's peak is no longer within the limit plus that floor.
pub const MEMORY_FLOOR_ENV: &str = "ATTEMPT_FUNNEL_MEMORY_FLOOR";

/// The smallest `--memory-limit` this run accepts.
fn memory_floor() -> u64 {
    std::env::var(MEMORY_FLOOR_ENV)
        .ok()
        .and_then(|size| crate::cli::parse_size(&size).ok())
        .unwrap_or(ingest::spill::MIN_MEMORY_LIMIT)
}

/// `show` resolves its rules exactly as `analyze` does, from the same flags and policy.
pub fn show(mut args: ShowArgs) -> Result<ShowConfig> {
    // `show trace.json`: a lone argument that names a file is the input, not an operation.
    // (`show ID -` reads an operation from stdin even where a file is named like it.)
    let operation_id = if args.input.files.is_empty() && Path::new(&args.operation_id).exists() {
        args.input.files.push(args.operation_id.into());
        None
    } else {
        Some(args.operation_id)
    };
    let policy = PolicyFile::read(args.rules.policy.as_deref())?;
    let base = base_rules(&args.input.options, &policy)?;
    let rules = with_flags(base, &args.rules, &policy.policy)?;
    // The policy's conditions gate nothing here, but a policy `analyze` would refuse is
    // refused here too.
    policy_conditions(&policy, &rules.hops)?;
    let style = style(&args.style, &OutputTarget::Stdout);
    let input = input_config(args.input, &rules, &policy.policy)?;
    Ok(ShowConfig {
        input,
        rules,
        style,
        operation_id,
        test_run_id: args.run,
    })
}

/// `replay`: the observed run's configuration, the candidate, and the change conditions.
pub fn replay(args: ReplayArgs) -> Result<ReplayConfig> {
    let ReplayArgs {
        candidate,
        seed,
        analyze: mut run,
    } = args;
    if run.partition.is_some() {
        anyhow::bail!(
            "replay does not take --partition: a candidate's retry budget spans operations, so a replay reads every operation (--partition is for analyze)"
        );
    }
    let policy = PolicyFile::read(run.rules.policy.as_deref())?;
    let base = base_rules(&run.input.options, &policy)?;
    let changes = change_conditions(&mut run.report.fail_on, &base.hops)?;
    let rules = with_flags(base, &run.rules, &policy.policy)?;
    let run = run_config(run, &policy, rules)?;
    if let Some(why) = run.format.refusal() {
        anyhow::bail!(why);
    }
    Ok(ReplayConfig {
        run,
        candidate,
        seed,
        changes,
    })
}

/// `diff`: how both sides are read and analysed, and the change conditions.
pub fn diff(args: DiffArgs) -> Result<DiffConfig> {
    let DiffArgs {
        before,
        after,
        input,
        rules: rule_args,
        mut report,
    } = args;
    let policy = PolicyFile::read(rule_args.policy.as_deref())?;
    let base = base_rules(&input, &policy)?;
    let changes = change_conditions(&mut report.fail_on, &base.hops)?;
    let rules = with_flags(base, &rule_args, &policy.policy)?;
    let run = AnalyzeArgs {
        input: InputArgs {
            files: Vec::new(),
            options: input,
        },
        rules: rule_args,
        partition: None,
        report,
    };
    let run = run_config(run, &policy, rules)?;
    if let Some(why) = run.format.refusal() {
        anyhow::bail!(why);
    }
    Ok(DiffConfig {
        run,
        before,
        after,
        changes,
    })
}

/// `merge`, before its partials are read.
pub fn merge(args: MergeArgs) -> Result<MergeConfig> {
    // `allow_missing` is the merge's own check of its set of partials (`commands::merge`).
    let MergeArgs {
        files,
        policy,
        report,
        ..
    } = args;
    if let Some(why) = report.format.refusal() {
        anyhow::bail!(why);
    }
    Ok(MergeConfig {
        partials: input_paths(files),
        policy: PolicyFile::read(policy.as_deref())?,
        report,
    })
}

impl MergeConfig {
    /// The merge's configuration under the rules the partials were made with (those of
    /// `partial`, the first one's: the merge refuses others): a policy may not change them,
    /// and the gate's conditions come from its `fail_on` and the flags.
    pub fn with_rules(self, rules: Rules, partial: &str) -> Result<AnalyzeConfig> {
        if self.policy.path.is_some() {
            check_policy_rules(&rules, &self.policy, partial)?;
        }
        let run = AnalyzeArgs {
            input: InputArgs {
                files: Vec::new(),
                options: InputOptions::default(),
            },
            rules: RuleArgs::default(),
            partition: None,
            report: self.report,
        };
        let mut config = run_config(run, &self.policy, rules)?;
        config.input.paths = self.partials;
        Ok(config)
    }
}

/// `convert`: its input, read with the hop order and mapping of the flags and the policy.
pub fn convert(args: ConvertArgs) -> Result<ConvertConfig> {
    let policy = PolicyFile::read(args.policy.as_deref())?;
    let rules = base_rules(&args.input.options, &policy)?;
    let input = input_config(args.input, &rules, &policy.policy)?;
    Ok(ConvertConfig {
        input,
        hops: rules.hops,
        output: OutputTarget::stdout_unless(args.output),
    })
}

/// `generate`: the mix, and where the events and the expected classes go.
pub fn generate(args: GenerateArgs) -> Result<GenerateConfig> {
    let options = generate::Options {
        ops: args.ops,
        seed: args.seed,
        mix: generate::Mix::parse(&args.mix)?,
    };
    let events = OutputTarget::stdout_unless(args.output);
    let expected = args.expected.map(OutputTarget::from_flag);
    if events == OutputTarget::Stdout && expected == Some(OutputTarget::Stdout) {
        anyhow::bail!(
            "--expected - and the events would both go to standard output: give the events --output FILE, e.g. -o events.jsonl --expected -"
        );
    }
    Ok(GenerateConfig {
        options,
        events,
        expected,
    })
}

/// A run's configuration, its rules resolved and its policy read.
fn run_config(args: AnalyzeArgs, policy: &PolicyFile, rules: Rules) -> Result<AnalyzeConfig> {
    let AnalyzeArgs {
        input,
        partition,
        report,
        ..
    } = args;
    let from_policy = policy_conditions(policy, &rules.hops)?;
    let from_flags = report
        .fail_on
        .iter()
        .map(|t| gate::condition::parse_condition(t, &rules.hops, Origin::Flag))
        .collect::<Result<Vec<_>>>()
        .context("in --fail-on")?;
    if report.format == OutputFormat::Parquet {
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
    let input = InputConfig {
        partition,
        ..input_config(input, &rules, &policy.policy)?
    };
    Ok(AnalyzeConfig {
        stderr_color: color_for(report.style.color, std::io::stderr().is_terminal()),
        style,
        input,
        format: report.format,
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

/// The policy's `fail_on` conditions.
fn policy_conditions(policy: &PolicyFile, hops: &HopOrder) -> Result<Vec<Condition>> {
    policy
        .policy
        .fail_on
        .iter()
        .map(|t| gate::condition::parse_condition(t, hops, Origin::Policy))
        .collect::<Result<Vec<_>>>()
        .with_context(|| format!("{}: fail_on", policy.invalid()))
}

/// The hop order and queue hops: defaults, then the policy file, then `--hops`.
fn base_rules(input: &InputOptions, policy: &PolicyFile) -> Result<Rules> {
    let hop_names = match (&input.hops, &policy.policy.hops) {
        (Some(flag), _) => flag.clone(),
        (None, Some(from_policy)) => from_policy.clone(),
        (None, None) => rules::DEFAULT_HOPS.iter().map(|s| s.to_string()).collect(),
    };
    let mut rules = Rules::new(HopOrder::new(hop_names)?);
    // Checked here, before the policy's values are applied, so that a policy error names
    // the policy and its key, not the flag the value would otherwise have come from.
    if policy.path.is_some() {
        policy
            .policy
            .check_hops(&rules.hops)
            .with_context(|| policy.invalid())?;
    }
    if let Some(queues) = &policy.policy.queue_hops {
        rules.queue_hops = rules.hop_flags("policy queue_hops", queues)?;
    }
    Ok(rules)
}

/// The rules over the hop order and queue hops of `base`: the policy file's, then the
/// flags'.
fn with_flags(mut rules: Rules, flags: &RuleArgs, policy: &Policy) -> Result<Rules> {
    apply_policy_rules(&mut rules, policy)?;
    rules.set_budgets(&flags.budget)?;
    rules.set_deadlines("--deadline", &flags.deadline)?;
    for (h, allowed) in rules
        .hop_flags("--allow-overlap", &flags.allow_overlap)?
        .into_iter()
        .enumerate()
    {
        rules.overlap_allowed[h] |= allowed;
    }
    let window = flags.burst_window.unwrap_or(rules.burst.window_ms);
    let min_ops = flags.burst_min_ops.unwrap_or(rules.burst.min_ops);
    if !rules::burst_window_is_valid(window) {
        anyhow::bail!(
            "--burst-window {}: the window is {}, e.g. --burst-window 50",
            crate::words::number(window),
            rules::BURST_WINDOW_RANGE
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
/// inference, retryable statuses and burst parameters, over `rules` (whose hop order and
/// queue hops are already set).
fn apply_policy_rules(rules: &mut Rules, policy: &Policy) -> Result<()> {
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

/// A policy given to `merge` may not change a rule the partials were made under: applied
/// over their rules, it must leave every setting as it was.
fn check_policy_rules(rules: &Rules, policy: &PolicyFile, partial: &str) -> Result<()> {
    let invalid = || policy.invalid();
    let path = policy.path.as_deref().unwrap_or(Path::new("-"));
    let policy = &policy.policy;
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

/// Splits `--fail-on` texts into change conditions (parsed here) and plain ones (left for
/// [`analyze_config`]).
fn change_conditions(
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

fn input_config(args: InputArgs, rules: &Rules, policy: &Policy) -> Result<InputConfig> {
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
    let presets = presets(&args.preset, mapping.as_ref())?;
    spans.operation_attribute = args.operation_attribute;
    if let Some(run) = args.run_attribute {
        spans.run_attribute = run;
    }
    Ok(InputConfig {
        paths,
        format: args.input_format,
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

/// The `--preset`s, each once, each with its mapping under the flags' and the policy's
/// (`mapping`): a key they map replaces the preset's, said once on stderr. Envoy's and
/// Istio's logs look alike (both are access logs), so one run reads access logs with one
/// of them.
fn presets(given: &[Preset], mapping: Option<&KeyMapping>) -> Result<Vec<(Preset, KeyMapping)>> {
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
    presets
        .into_iter()
        .map(|p| {
            let mut composed = p.mapping().map_err(anyhow::Error::msg)?;
            if let Some(over) = mapping {
                for replaced in composed.overlay(over).map_err(anyhow::Error::msg)? {
                    eprintln!("attempt-funnel: {replaced}");
                }
            }
            Ok((p, composed))
        })
        .collect()
}

/// The input's key mapping: the policy's, then the flags'; `None` when there is none, so
/// that lines take the plain path.
fn key_mapping(
    args: &cli::InputOptions,
    rules: &Rules,
    policy: &Policy,
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
fn check_parquet_output(output: Option<&Path>) -> Result<()> {
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

/// The terminal reports' style for output to `target`: fitted to the terminal's width and
/// coloured only when that output is the terminal.
fn style(args: &cli::StyleArgs, target: &OutputTarget) -> Style {
    let terminal = *target == OutputTarget::Stdout && std::io::stdout().is_terminal();
    Style {
        width: if terminal { terminal_width() } else { None },
        color: color_for(args.color, terminal),
        ascii: args.ascii,
    }
}

/// The width of the terminal standard output is: `COLUMNS` when set to a number (as `ls`
/// and most tools read it: a user's or a CI runner's own width), else the columns the
/// terminal reports, even when it reports no rows (a pseudo-terminal of some CI runners;
/// the `terminal_size` crate gives nothing then).
fn terminal_width() -> Option<usize> {
    let columns = std::env::var("COLUMNS").ok();
    if let Some(n) = columns.and_then(|c| c.trim().parse::<usize>().ok()) {
        return (n > 0).then_some(n);
    }
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one `winsize` into `size`, which outlives the call.
        let ok =
            unsafe { libc::ioctl(std::io::stdout().as_raw_fd(), libc::TIOCGWINSZ, &mut size) } == 0;
        (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
    }
    #[cfg(not(unix))]
    {
        terminal_size::terminal_size_of(std::io::stdout())
            .map(|(terminal_size::Width(w), _)| usize::from(w))
    }
}

fn color_for(choice: cli::ColorArg, terminal: bool) -> bool {
    // A dumb terminal (TERM=dumb: Emacs' shell, some CI logs) shows escapes as text.
    let terminal = terminal && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
    wants_color(
        choice,
        terminal,
        std::env::var_os("NO_COLOR"),
        std::env::var_os("CLICOLOR_FORCE"),
    )
}

/// `--color`: `always` and `never` as said; `auto` colours a terminal unless `NO_COLOR` is
/// set to anything but the empty string, and colours anything when `CLICOLOR_FORCE` is set
/// to anything but `0` (NO_COLOR wins: it is the user's own refusal).
fn wants_color(
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
