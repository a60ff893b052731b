//! `blackhole`: takes any input, acknowledges every record at once and
//! counts it; for benchmarks and for trying a log source out.

use std::sync::Arc;

use crate::sink::{self, Discard};

use crate::descriptor::{Input, Running, Sink, SinkType, Start, Transport};

/// `type = "blackhole"`; `name` (default `blackhole`) tells two apart on
/// `/metrics`.
pub static TYPE: SinkType = SinkType {
    name: "blackhole",
    accepts: &[Input::Metrics, Input::Logs],
    transport: Transport::Local,
    compressions: &[],
    headers: &[],
    keys: &[],
    check: crate::descriptor::no_own_keys,
    start,
    reloads: true,
    host: None,
};

fn start(_: &Sink, st: &mut Start<'_>) -> anyhow::Result<Running> {
    let mut running: Running = sink::spawn(Discard, Arc::clone(&st.stats))?.into();
    if !st.sources.is_empty() {
        let (tx, thread) = crate::logs::blackhole::spawn(Arc::clone(&st.stats))?;
        running.add_logs(st, &tx, thread);
    }
    Ok(running)
}

#[cfg(test)]
mod tests {
    use crate::registry::parse;

    const TWO: &str = "[[logs]]\nname = \"app\"\ninclude = [\"/var/log/*.log\"]\n\n[[sinks]]\ntype = \"blackhole\"\ninputs = [\"app\"]\n\n[[sinks]]\ntype = \"blackhole\"\ninputs = [\"app\"]\n";

    #[test]
    fn two_blackholes_need_names_to_be_told_apart() {
        let e = parse(TWO).unwrap_err();
        assert_eq!(e.key, "sinks[1].name");
        assert_eq!(e.line, Some(9));
        let named = TWO.replacen(
            "type = \"blackhole\"",
            "type = \"blackhole\"\nname = \"null\"",
            1,
        );
        let c = parse(&named).unwrap();
        assert_eq!(c.sinks[0].name, "null");
        assert_eq!(c.sinks[1].name, "blackhole");
    }
}
