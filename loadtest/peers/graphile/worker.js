// graphile-worker peer: one worker process (library mode, `run`), the no-op task.
// Env: RATCHET_BENCH_DSN, RATCHET_BENCH_CONCURRENCY, RATCHET_BENCH_POOL,
// RATCHET_BENCH_PROBE (see loadtest/peers/probe.py: "<probe> <unix time>" lines).
const fs = require("fs");
const { run } = require("graphile-worker");

const probeFile = process.env.RATCHET_BENCH_PROBE;

async function noop(payload) {
  if (payload && payload.probe !== undefined && probeFile) {
    fs.appendFileSync(probeFile, `${payload.probe} ${(Date.now() / 1000).toFixed(6)}\n`);
  }
  if (payload && payload.sleep_s) {
    await new Promise((resolve) => setTimeout(resolve, payload.sleep_s * 1000));
  }
}

async function main() {
  const runner = await run({
    connectionString: process.env.RATCHET_BENCH_DSN,
    concurrency: Number(process.env.RATCHET_BENCH_CONCURRENCY || 24),
    maxPoolSize: Number(process.env.RATCHET_BENCH_POOL || 25),
    noHandleSignals: false,
    taskList: { noop },
  });
  await runner.promise;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
