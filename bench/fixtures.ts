/**
 * Benchmark helper process: starts N Streamable HTTP fixture servers (test/fixtures/http-fixture.ts,
 * stateful, one session per client) on 127.0.0.1 and prints one JSON line `{"urls": [...]}` on
 * stdout. It serves until SIGTERM/SIGINT or until its stdin closes (so it never outlives the
 * benchmark that started it), then stops every fixture and exits.
 *
 *   node --import tsx bench/fixtures.ts [--count 1] [--progress-tool] [--modern]
 *
 * `--progress-tool` adds the fixture's `progress` tool {count}: `count` notifications/progress, then the answer.
 * `--modern` serves the era fixture instead (test/fixtures/era-http.ts: SDK v2, the 2026-07-28 revision only),
 * its server instances reused across requests (the cheapest serving the SDK allows: a new instance
 * per request spent 3 to 5 times the 2025 fixture's CPU per call, so the store batched less).
 */
import { parseArgs } from "node:util"
import { startEraHttpFixture } from "../test/fixtures/era-http.js"
import { startHttpFixture, type HttpFixture } from "../test/fixtures/http-fixture.js"

const { values } = parseArgs({
  options: { count: { type: "string", default: "1" }, "progress-tool": { type: "boolean", default: false }, modern: { type: "boolean", default: false } },
  strict: true
})
const count = Math.max(1, Number(values.count))

const fixtures: Array<Pick<HttpFixture, "url" | "stop">> = []
for (let i = 0; i < count; i++) fixtures.push(values.modern ? await startEraHttpFixture({ reuseServers: true }) : await startHttpFixture({ server: { progressTool: values["progress-tool"] } }))

let stopping = false
const stop = async () => {
  if (stopping) return
  stopping = true
  const timer = setTimeout(() => process.exit(0), 2_000)
  await Promise.all(fixtures.map((f) => f.stop().catch(() => undefined)))
  clearTimeout(timer)
  process.exit(0)
}
process.on("SIGTERM", () => void stop())
process.on("SIGINT", () => void stop())
process.stdin.on("end", () => void stop())
process.stdin.on("close", () => void stop())
process.stdin.resume()

process.stdout.write(`${JSON.stringify({ urls: fixtures.map((f) => f.url), pid: process.pid })}\n`)
