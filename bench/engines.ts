/**
 * The calling side alone: the store's own protocol engine (src/mcp/session.ts's `Session` on its
 * stdio transport, src/mcp/stdio.ts) against the SDK v2 `Client` (@modelcontextprotocol/client, on its
 * `StdioClientTransport`), both in this process, both calling `tools/call echo` on the same kind of
 * upstream: bench/raw-upstream.ts, a responder that answers at once and costs little, in each era.
 * It exists because the engine was chosen over SDK 1.x's Client (bench/RESULTS.md, "One protocol
 * engine") and SDK v2's Client, which speaks both eras, is the other candidate for its place.
 *
 *   npx tsx bench/engines.ts [--rounds 12] [--calls 2000] [--concurrencies 1,32] [--eras 2025,2026-07-28]
 *
 * One upstream process per caller and era (so none shares a pipe), each caller connected once (the
 * store's engine as src/mcp/connect.ts connects it: the 2025 handshake, or server/discover and
 * adopting its result; the v2 Client with version negotiation "legacy" or pinned to 2026-07-28),
 * tools/list once; then, per concurrency, rounds in which every caller of every era makes `calls`
 * calls with c callers, one caller after another, in an order rotated each round and reversed every
 * other one (two unmeasured rounds first). The CPU of this process over each caller's turn
 * (`process.cpuUsage()`, user + system) is that caller's: the upstreams are other processes.
 * Reported: µs of CPU per call of each, Client/engine per era and each caller's modern/2025, as the
 * mean over the rounds and the 95 % interval of the round ratios (geometric mean, Student's t on the
 * logs), and the upstreams' own CPU per call.
 * Every answer is checked (the echoed text).
 */
import { Client } from "@modelcontextprotocol/client"
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio"
import { loadavg } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { discoverFacts } from "../src/mcp/era.js"
import { upstreamSchemaValidator } from "../src/mcp/json-schema.js"
import { Session } from "../src/mcp/session.js"
import { StdioProcessTransport } from "../src/mcp/stdio.js"
import { ROOT, TSX_IMPORT, cpuSeconds } from "./procs.js"

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "12" },
    calls: { type: "string", default: "2000" },
    concurrencies: { type: "string", default: "1,32" },
    eras: { type: "string", default: "2025,2026-07-28" }
  },
  strict: true
})

const log = (line: string) => process.stdout.write(`${line}\n`)
const RAW = join(ROOT, "bench", "raw-upstream.ts")
const MODERN = "2026-07-28"
const CONTROLS = { timeout: 60_000 }
const clientInfo = { name: "bench-engines", version: "1.0.0" }

const ratioInterval = (ratios: ReadonlyArray<number>) => {
  const logs = ratios.map(Math.log)
  const n = logs.length
  const m = logs.reduce((x, y) => x + y, 0) / n
  const sd = Math.sqrt(logs.reduce((x, y) => x + (y - m) ** 2, 0) / Math.max(1, n - 1))
  const T = [12.71, 4.3, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.2, 2.18, 2.16, 2.14, 2.13, 2.12, 2.11, 2.1, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04]
  const half = ((T[n - 2] ?? 1.96) * sd) / Math.sqrt(n)
  return { mean: Math.exp(m), low: Math.exp(m - half), high: Math.exp(m + half) }
}

const textOf = (result: { content?: unknown }): unknown =>
  Array.isArray(result.content) ? (result.content[0] as { text?: unknown } | undefined)?.text : undefined

interface Caller {
  readonly label: string
  readonly call: (text: string) => Promise<void>
  readonly upstreamPid: () => number | undefined
  readonly close: () => Promise<void>
}

/** The store's engine on its stdio transport, connected as src/mcp/connect.ts connects it. */
const engine = async (era: string): Promise<Caller> => {
  const transport = new StdioProcessTransport({ command: process.execPath, args: [...TSX_IMPORT, RAW, "--era", era] })
  const session = new Session(transport, { clientInfo, validator: upstreamSchemaValidator }, { onNotification: () => {}, onError: () => {}, onClose: () => {} })
  await session.start()
  if (era === MODERN) {
    const facts = discoverFacts(await session.discover(MODERN, CONTROLS))
    if (facts === undefined) throw new Error("engine: no discover result")
    session.adopt(MODERN, facts)
  } else {
    await session.open(CONTROLS)
  }
  await session.listTools({}, CONTROLS)
  return {
    label: "engine",
    call: async (text) => {
      const result = await session.callTool("echo", { text }, CONTROLS)
      if (textOf(result) !== text) throw new Error(`engine: ${JSON.stringify(result).slice(0, 200)}`)
    },
    upstreamPid: () => transport.pid,
    close: () => session.close()
  }
}

/** SDK v2's Client on its stdio transport, in the era given (pinned: no probe). */
const sdkClient = async (era: string): Promise<Caller> => {
  const transport = new StdioClientTransport({ command: process.execPath, args: [...TSX_IMPORT, RAW, "--era", era] })
  const client = new Client(clientInfo, { versionNegotiation: { mode: era === MODERN ? { pin: MODERN } : "legacy" } })
  await client.connect(transport)
  await client.listTools()
  return {
    label: "SDK v2 Client",
    call: async (text) => {
      const result = await client.callTool({ name: "echo", arguments: { text } })
      if (textOf(result) !== text) throw new Error(`client: ${JSON.stringify(result).slice(0, 200)}`)
    },
    upstreamPid: () => transport.pid ?? undefined,
    close: () => client.close()
  }
}

/** `calls` calls with `c` callers; resolves with the CPU seconds of this process over them. */
const round = async (caller: Caller, c: number, calls: number, tag: string): Promise<number> => {
  let next = 0
  const start = process.cpuUsage()
  const worker = async () => {
    while (next < calls) {
      const i = next++
      await caller.call(`${tag}-${i}`)
    }
  }
  await Promise.all(Array.from({ length: c }, worker))
  const used = process.cpuUsage(start)
  return (used.user + used.system) / 1e6
}

const main = async () => {
  const rounds = Number(values.rounds)
  const calls = Number(values.calls)
  const concurrencies = String(values.concurrencies).split(",").map(Number)
  const eras = String(values.eras).split(",")
  log(`engines: ${rounds} rounds of ${calls} calls per caller; Node ${process.version}; load ${loadavg().map((l) => l.toFixed(2)).join(", ")}; ${new Date().toISOString()}`)
  // Every caller of every era at once: each round runs them all, in an order rotated (and reversed
  // every other round), so each ratio below is of calls interleaved in the same rounds.
  const callers: Array<Caller & { era: string }> = []
  for (const era of eras) {
    callers.push({ ...(await engine(era)), era })
    callers.push({ ...(await sdkClient(era)), era })
  }
  const pids = callers.map((c) => c.upstreamPid())
  const rows: string[] = []
  const eraRows: string[] = []
  for (const c of concurrencies) {
    const per: number[][] = callers.map(() => [])
    const up0 = pids.map((pid) => (pid === undefined ? NaN : cpuSeconds(pid)))
    const order = (r: number) => {
      const k = callers.map((_, i) => (i + r) % callers.length)
      return r % 2 === 0 ? k : k.reverse()
    }
    for (let w = 0; w < 2; w++) for (const k of order(w)) await round(callers[k]!, c, calls, `w${w}`)
    for (let r = 0; r < rounds; r++) for (const k of order(r)) per[k]!.push((await round(callers[k]!, c, calls, `r${r}`)) * 1e6 / calls)
    const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length
    const up = pids.map((pid, k) => (pid === undefined ? NaN : ((cpuSeconds(pid) - up0[k]!) * 1e6) / ((rounds + 2) * calls)))
    const compare = (a: number, b: number) => {
      const ci = ratioInterval(per[b]!.map((x, r) => x / per[a]![r]!))
      return `${(mean(per[b]!) / mean(per[a]!)).toFixed(3)} (${ci.low.toFixed(3)}–${ci.high.toFixed(3)})`
    }
    for (let e = 0; e < eras.length; e++) {
      const [a, b] = [2 * e, 2 * e + 1]
      const row = `| ${eras[e]} | ${c} | ${mean(per[a]!).toFixed(1)} | ${mean(per[b]!).toFixed(1)} | ${compare(a, b)} | ${up[a]!.toFixed(0)}, ${up[b]!.toFixed(0)} | ${rounds} x ${calls} |`
      log(row)
      rows.push(row)
    }
    if (eras.length === 2) {
      const row = `| ${c} | ${compare(0, 2)} | ${compare(1, 3)} |`
      log(row)
      eraRows.push(row)
    }
  }
  for (const caller of callers) await caller.close()
  log("\n| era | c | engine µs/call | SDK v2 Client µs/call | Client/engine (95 % CI of round ratios) | upstream µs/call (engine's, Client's) | rounds |")
  log("|---|---|---:|---:|---|---|---|")
  for (const row of rows) log(row)
  if (eraRows.length > 0) {
    log(`\n| c | engine: ${eras[1]} / ${eras[0]} (95 % CI) | SDK v2 Client: ${eras[1]} / ${eras[0]} (95 % CI) |`)
    log("|---|---|---|")
    for (const row of eraRows) log(row)
  }
  log(`load ${loadavg().map((l) => l.toFixed(2)).join(", ")}; ${new Date().toISOString()}`)
}

await main()
process.exit(0)
