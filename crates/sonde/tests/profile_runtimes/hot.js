// A Node.js burner for tests/profile_runtimes.rs: `hot` does 70% of the
// work and `cold` 30%, until the given number of seconds has passed.
// Run it with `node --perf-basic-prof` so that V8 writes the perf map
// that names its compiled code (/tmp/perf-PID.map).

function hot(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (Math.imul(x, 31) + i) >>> 0;
  return x;
}

function cold(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (Math.imul(x, 17) + i) >>> 0;
  return x;
}

const end = Date.now() + Number(process.argv[2]) * 1000;
let sink = 0;
let ready = false;
while (Date.now() < end) {
  sink ^= hot(700000) ^ cold(300000);
  if (!ready) {
    console.log("ready");
    ready = true;
  }
}
if (sink === 0.5) console.log(sink);
