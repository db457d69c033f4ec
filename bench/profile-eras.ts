/**
 * Where the store's CPU per REST call goes in each era, against upstreams that cost the same: one
 * store (its sources through tsx, so frames name src/ files) under `node --cpu-prof`, with
 * bench/raw-upstream.ts over stdio in both eras as two services; after a warm-up of both, windows of
 * `calls` REST calls to each, alternating (2025, 2026-07-28, 2025, ...), and the samples of each era's
 * windows summed: busy µs per call, and the functions whose self time per call differs most between
 * the eras. It exists to say where the modern path costs the store more, if it does (bench/ab.ts eras
 * with `rawio,rawmodernio --within` measures whether it does). With `--face mcp` the two ways are the
 * store's `/mcp` instead: a 2025 client on a session (SDK 1.x) and a 2026-07-28 client without one
 * (SDK v2, pinned), both calling the 2025 raw upstream.
 *
 *   npx tsx bench/profile-eras.ts [--c 32] [--calls 3000] [--windows 4] [--face rest|mcp]
 */
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { HttpClient, closedLoop } from "./load.js"
import { readProfile, type CpuProfile } from "./profile.js"
import { ROOT, SOURCES_SCRIPT, TSX_IMPORT, startStore, stopAll, stopChild } from "./procs.js"

const { values } = parseArgs({
  options: { c: { type: "string", default: "32" }, calls: { type: "string", default: "3000" }, windows: { type: "string", default: "4" }, face: { type: "string", default: "rest" } },
  strict: true
})
const log = (line: string) => process.stdout.write(`${line}\n`)
const RAW = join(ROOT, "bench", "raw-upstream.ts")
const ERAS = [
  ["2025", "rawio"],
  ["2026-07-28", "rawmodernio"]
] as const

/** Self time (ms) per frame over the samples inside any of `windows` (ms since the profile's start); and the busy total. */
const selfTimes = (profile: CpuProfile, windows: ReadonlyArray<readonly [number, number]>) => {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const self = new Map<string, number>()
  let busy = 0
  let t = 0
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i]! / 1000
    if (!windows.some(([from, to]) => t >= from && t < to)) continue
    const delta = (profile.timeDeltas[i + 1] ?? 0) / 1000
    const frame = byId.get(profile.samples[i]!)!.callFrame
    if (frame.functionName === "(idle)") continue
    busy += delta
    const url = frame.url.replace(/^file:\/\//, "").replace(ROOT, "")
    const nm = url.lastIndexOf("node_modules/")
    const key = `${frame.functionName || "(anonymous)"} ${nm >= 0 ? url.slice(nm + 13) : url}:${frame.lineNumber + 1}`
    self.set(key, (self.get(key) ?? 0) + delta)
  }
  return { self, busy }
}

const main = async () => {
  const c = Number(values.c)
  const calls = Number(values.calls)
  const windows = Number(values.windows)
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-profile-eras-"))
  const profDir = join(dir, "cpuprofile")
  mkdirSync(profDir, { recursive: true })
  const configFile = join(dir, "mcp.json")
  writeFileSync(
    configFile,
    JSON.stringify({
      mcpServers: {
        rawio: { command: process.execPath, args: [...TSX_IMPORT, RAW, "--era", "2025"] },
        rawmodernio: { command: process.execPath, args: [...TSX_IMPORT, RAW, "--era", "2026-07-28"] }
      }
    })
  )
  const store = await startStore(configFile, { nodeArgs: ["--cpu-prof", `--cpu-prof-dir=${profDir}`], name: "store (profiled)", script: SOURCES_SCRIPT })
  const http = new HttpClient(store.url, c)
  for (const [, service] of ERAS) {
    const res = await http.post("/for_store/wait_service", { client_id_or_service_name: service, status: "healthy", timeout: 30 }, 35_000)
    if ((res.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) throw new Error(`${service} not healthy`)
  }
  const rest = (service: string) => async (i: number) => {
    const text = `${service}-${i}`
    const res = await http.post("/for_store/call_tool", { tool_name: `${service}__echo`, args: { text } })
    if (res.status !== 200 || (res.body as { result?: unknown }).result !== text) throw new Error(`${service}: HTTP ${res.status} ${res.text.slice(0, 200)}`)
  }
  // --face mcp: each era's client on /mcp, both calling the 2025 raw upstream.
  const v1 = new ClientV1({ name: "profile-2025", version: "1.0.0" })
  const v2 = new Client({ name: "profile-2026", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
  if (values.face === "mcp") {
    await v1.connect(new TransportV1(new URL(`${store.url}/mcp`)))
    await v2.connect(new StreamableHTTPClientTransport(new URL(`${store.url}/mcp`)))
  }
  const mcp = (client: ClientV1 | Client) => async (i: number) => {
    const text = `mcp-${i}`
    const result = await client.callTool({ name: "rawio__echo", arguments: { text } })
    const first = (result.content as Array<{ text?: string }> | undefined)?.[0]
    if (first?.text !== text) throw new Error(`/mcp: ${JSON.stringify(result).slice(0, 200)}`)
  }
  const call = (service: string) => (values.face === "mcp" ? mcp(service === "rawio" ? v1 : v2) : rest(service))
  const spans: Record<string, Array<readonly [number, number]>> = { "2025": [], "2026-07-28": [] }
  try {
    for (const [, service] of ERAS) await closedLoop(call(service), { concurrency: c, calls: 0, warmup: calls, maxSeconds: 120 })
    for (let w = 0; w < windows; w++) {
      for (const [era, service] of w % 2 === 0 ? ERAS : [...ERAS].reverse()) {
        const from = performance.now() - store.child.spawnedAt
        const r = await closedLoop(call(service), { concurrency: c, calls, warmup: 0, maxSeconds: 120 })
        if (r.errors > 0) throw new Error(`${service}: ${r.errors} errors: ${r.firstError}`)
        spans[era]!.push([from + 20, performance.now() - store.child.spawnedAt - 20])
      }
    }
  } finally {
    http.close()
    await Promise.all([v1.close(), v2.close()]).catch(() => undefined)
    await stopChild(store.child, 15_000)
  }
  const { file, profile } = readProfile(profDir)
  // The profile starts a moment after the spawn (its clock: microseconds from startTime).
  const per = ERAS.map(([era]) => selfTimes(profile, spans[era]!))
  const n = windows * calls
  log(`profile ${file}; ${values.face === "mcp" ? "/mcp" : "REST"}; c=${c}, ${windows} windows of ${calls} calls per era`)
  log(`busy µs per call: 2025 ${((per[0]!.busy * 1000) / n).toFixed(1)}, 2026-07-28 ${((per[1]!.busy * 1000) / n).toFixed(1)}`)
  const keys = new Set([...per[0]!.self.keys(), ...per[1]!.self.keys()])
  const rows = [...keys].map((k) => ({ k, a: ((per[0]!.self.get(k) ?? 0) * 1000) / n, b: ((per[1]!.self.get(k) ?? 0) * 1000) / n }))
  log("\n| function (self time) | 2025 µs/call | 2026-07-28 µs/call | difference |")
  log("|---|---:|---:|---:|")
  for (const r of rows.sort((x, y) => Math.abs(y.b - y.a) - Math.abs(x.b - x.a)).slice(0, 25)) log(`| ${r.k} | ${r.a.toFixed(2)} | ${r.b.toFixed(2)} | ${(r.b - r.a).toFixed(2)} |`)
}

try {
  await main()
} finally {
  await stopAll()
}
