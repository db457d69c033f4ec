/**
 * The two protocol eras side by side, in one run: the store's CPU time per tool call (read from
 * /proc around each cell) through `/mcp` from a 2025 client on a session (SDK 1.x) and from a
 * 2026-07-28 client without one (SDK v2, pinned), against the same 2025 upstream (over Streamable
 * HTTP and over stdio); and through REST against a 2025 upstream and a 2026-07-28 one (SDK v2,
 * modern-only), over Streamable HTTP and stdio;
 * and mcp-hub's REST against the 2025 upstreams (it speaks no 2026-07-28), its own CPU per call.
 * Each cell calls `echo` with distinct text at c=1 and c=32; the cells of one concurrency run in
 * rounds, in a rotating order, so that background load hits them alike.
 *
 *   npx tsx bench/eras.ts [--write]     (--write: its section of bench/RESULTS.md)
 *
 * The HTTP upstreams run in processes of their own (bench/fixtures.ts, with `--modern` for the era
 * fixture); the stdio ones are the store's children. Only the store's CPU is compared.
 */
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { eraStdio, stdioFixture } from "../test/fixtures/paths.js"
import { HttpClient, closedLoop, countAbortListenerWarnings } from "./load.js"
import { ROOT, buildStore, cpuSeconds, startFixtures, startHub, startStore, stopAll, stopChild } from "./procs.js"
import { writeMarkedSection } from "./report.js"

export const ERAS_START = "<!-- eras: written by bench/eras.ts -->"
export const ERAS_END = "<!-- /eras -->"

/** One way of calling, and the service it reaches. */
interface Way {
  readonly label: string
  readonly call: (text: string) => Promise<void>
  /** The process whose CPU is measured: the store's unless given (mcp-hub's). */
  readonly pid?: number | undefined
}

export interface ErasCell {
  readonly label: string
  readonly concurrency: number
  readonly cpuUsPerCall: number
  readonly rate: number
  readonly p50: number
  readonly errors: number
}

const textOf = (content: unknown): unknown => (Array.isArray(content) ? (content[0] as { text?: unknown } | undefined)?.text : undefined)

/** Runs every cell; `rounds` rounds of `calls` calls per cell and concurrency. */
export const runEras = async (dir: string, options: { readonly calls: number; readonly rounds: number; readonly log: (line: string) => void }): Promise<ErasCell[]> => {
  const [oldProcess, modernProcess] = await Promise.all([startFixtures(1, "fixtures (2025)"), startFixtures(1, "fixtures (2026-07-28)", ["--modern"])])
  const old = { url: oldProcess.urls[0]! }
  const modern = { url: modernProcess.urls[0]! }
  const configFile = join(dir, "mcp.json")
  const oldStdio = stdioFixture()
  const modernStdio = eraStdio("reject")
  writeFileSync(
    configFile,
    JSON.stringify({
      mcpServers: {
        old: { url: old.url },
        modern: { url: modern.url },
        oldio: { command: oldStdio.command, args: oldStdio.args },
        modernio: { command: modernStdio.command, args: modernStdio.args }
      }
    })
  )
  const store = await startStore(configFile)
  // The peer, on the 2025 upstreams only (it speaks no 2026-07-28).
  const hub = await startHub(join(dir, "mcp-hub"), { old: { url: old.url }, oldio: { command: oldStdio.command, args: oldStdio.args } })
  const hubHttp = new HttpClient(hub.url, 64)
  const http = new HttpClient(store.url, 64)
  const v1 = new ClientV1({ name: "bench-2025", version: "1.0.0" })
  const v2 = new Client({ name: "bench-2026", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
  try {
    for (const name of ["old", "modern", "oldio", "modernio"]) {
      const res = await http.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 30 }, 35_000)
      if ((res.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) throw new Error(`${name} not healthy: ${JSON.stringify(res.body)}`)
    }
    await v1.connect(new TransportV1(new URL(`${store.url}/mcp`)))
    await v2.connect(new StreamableHTTPClientTransport(new URL(`${store.url}/mcp`)))
    const rest = (service: string): Way["call"] => async (text) => {
      const res = await http.post("/for_store/call_tool", { tool_name: `${service}__echo`, args: { text } })
      if (res.status !== 200 || (res.body as { result?: unknown }).result !== text) throw new Error(`REST ${service}: HTTP ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`)
    }
    const viaHub = (service: string): Way["call"] => async (text) => {
      const res = await hubHttp.post("/api/servers/tools", { server_name: service, tool: "echo", arguments: { text } })
      if (res.status !== 200 || textOf((res.body as { result?: { content?: unknown } } | undefined)?.result?.content) !== text) throw new Error(`mcp-hub ${service}: HTTP ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`)
    }
    const mcp = (client: ClientV1 | Client, label: string, service = "old"): Way["call"] => async (text) => {
      const result = await client.callTool({ name: `${service}__echo`, arguments: { text } })
      if (textOf(result.content) !== text) throw new Error(`${label}: ${JSON.stringify(result).slice(0, 200)}`)
    }
    const ways: ReadonlyArray<Way> = [
      { label: "/mcp, 2025 client (session) → 2025 upstream, HTTP", call: mcp(v1, "mcp 2025") },
      { label: "/mcp, 2026-07-28 client (no session) → 2025 upstream, HTTP", call: mcp(v2, "mcp 2026") },
      { label: "/mcp, 2025 client (session) → 2025 upstream, stdio", call: mcp(v1, "mcp 2025", "oldio") },
      { label: "/mcp, 2026-07-28 client (no session) → 2025 upstream, stdio", call: mcp(v2, "mcp 2026", "oldio") },
      { label: "REST → 2025 upstream, HTTP", call: rest("old") },
      { label: "REST → 2026-07-28 upstream, HTTP", call: rest("modern") },
      { label: "REST → 2025 upstream, stdio", call: rest("oldio") },
      { label: "REST → 2026-07-28 upstream, stdio", call: rest("modernio") },
      { label: "mcp-hub (REST) → 2025 upstream, HTTP", call: viaHub("old"), pid: hub.child.pid },
      { label: "mcp-hub (REST) → 2025 upstream, stdio", call: viaHub("oldio"), pid: hub.child.pid }
    ]
    const pid = store.child.pid
    const cells: ErasCell[] = []
    let serial = 0
    for (const concurrency of [1, 32]) {
      const totals = ways.map(() => ({ cpu: 0, calls: 0, seconds: 0, count: 0, p50: [] as number[], errors: 0 }))
      // A warm-up of every way (JIT, sockets), not measured.
      for (const way of ways) await closedLoop((i) => way.call(`warm-${serial}-${i}`), { concurrency, calls: 0, warmup: Math.max(100, concurrency * 4), maxSeconds: 60 })
      for (let round = 0; round < options.rounds; round++) {
        for (let k = 0; k < ways.length; k++) {
          const index = (k + round) % ways.length
          const way = ways[index]!
          const cell = serial++
          const measured = way.pid ?? pid
          const before = cpuSeconds(measured)
          const result = await closedLoop((i) => way.call(`c${cell}-${i}`), { concurrency, calls: options.calls, warmup: 0, maxSeconds: 60 })
          const total = totals[index]!
          total.cpu += cpuSeconds(measured) - before
          total.calls += result.count + result.errors
          total.count += result.count
          total.seconds += result.seconds
          total.p50.push(result.p50)
          total.errors += result.errors
          if (result.errors > 0) options.log(`  ${way.label} c=${concurrency}: ${result.errors} errors: ${result.firstError}`)
        }
      }
      ways.forEach((way, index) => {
        const t = totals[index]!
        const p50 = [...t.p50].sort((a, b) => a - b)[Math.floor(t.p50.length / 2)] ?? 0
        const cell = { label: way.label, concurrency, cpuUsPerCall: (t.cpu * 1e6) / Math.max(1, t.calls), rate: t.count / Math.max(1e-9, t.seconds), p50, errors: t.errors }
        cells.push(cell)
        options.log(`  c=${String(concurrency).padEnd(2)} ${way.label.padEnd(62)} ${cell.cpuUsPerCall.toFixed(0).padStart(5)} µs/call  ${cell.rate.toFixed(0).padStart(6)} calls/s  p50 ${p50.toFixed(2)} ms`)
      })
    }
    return cells
  } finally {
    http.close()
    hubHttp.close()
    await Promise.allSettled([v1.close(), v2.close()])
    await Promise.all([stopChild(store.child), stopChild(hub.child), stopChild(oldProcess.child), stopChild(modernProcess.child)])
  }
}

/** The section of bench/RESULTS.md: the cells, and the ratios the targets are about. */
export const erasMarkdown = (cells: ReadonlyArray<ErasCell>, git: string, calls: number, rounds: number): string => {
  const at = (label: string, c: number) => cells.find((x) => x.label === label && x.concurrency === c)
  const ratio = (a: string, b: string, c: number) => {
    const x = at(a, c)
    const y = at(b, c)
    return x === undefined || y === undefined ? "n/a" : (x.cpuUsPerCall / y.cpuUsPerCall).toFixed(3)
  }
  const rows = cells.map((c) => `| ${c.label} | ${c.concurrency} | ${c.cpuUsPerCall.toFixed(0)} | ${c.rate.toFixed(0)} | ${c.p50.toFixed(2)} | ${c.errors} |`)
  const ratios = [1, 32].flatMap((c) => [
    `| c=${c} | /mcp: 2026-07-28 client / 2025 client | ${ratio("/mcp, 2026-07-28 client (no session) → 2025 upstream, HTTP", "/mcp, 2025 client (session) → 2025 upstream, HTTP", c)} |`,
    `| c=${c} | /mcp, stdio upstream: 2026-07-28 client / 2025 client | ${ratio("/mcp, 2026-07-28 client (no session) → 2025 upstream, stdio", "/mcp, 2025 client (session) → 2025 upstream, stdio", c)} |`,
    `| c=${c} | REST, HTTP: 2026-07-28 upstream / 2025 upstream | ${ratio("REST → 2026-07-28 upstream, HTTP", "REST → 2025 upstream, HTTP", c)} |`,
    `| c=${c} | REST, stdio: 2026-07-28 upstream / 2025 upstream | ${ratio("REST → 2026-07-28 upstream, stdio", "REST → 2025 upstream, stdio", c)} |`,
    `| c=${c} | 2025 upstream, HTTP: the store's REST / mcp-hub | ${ratio("REST → 2025 upstream, HTTP", "mcp-hub (REST) → 2025 upstream, HTTP", c)} |`,
    `| c=${c} | 2025 upstream, stdio: the store's REST / mcp-hub | ${ratio("REST → 2025 upstream, stdio", "mcp-hub (REST) → 2025 upstream, stdio", c)} |`,
    `| c=${c} | 2025 upstream, HTTP: the store's /mcp, 2026-07-28 client / mcp-hub | ${ratio("/mcp, 2026-07-28 client (no session) → 2025 upstream, HTTP", "mcp-hub (REST) → 2025 upstream, HTTP", c)} |`
  ])
  return [
    ERAS_START,
    "## The two protocol eras (bench/eras.ts)",
    "",
    `git ${git}, ${new Date().toISOString()}; ${rounds} rounds of ${calls} calls per cell, the cells of a concurrency in rotating order; the store's CPU per call from /proc (mcp-hub's for its cells).`,
    "",
    "| way | c | store (or mcp-hub) CPU µs/call | calls/s | p50 ms | errors |",
    "|---|---|---|---|---|---|",
    ...rows,
    "",
    "| concurrency | ratio of the store's CPU per call | value |",
    "|---|---|---|",
    ...ratios,
    ERAS_END
  ].join("\n")
}

export const writeErasSection = (file: string, section: string): void => writeMarkedSection(file, ERAS_START, ERAS_END, section)

// Run alone: `npx tsx bench/eras.ts [--write]`.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { write: { type: "boolean", default: false } }, strict: true })
  const quick = process.env["BENCH_QUICK"] === "1"
  const calls = Number(process.env["BENCH_ERAS_CALLS"] ?? (quick ? 100 : 400))
  const rounds = Number(process.env["BENCH_ERAS_ROUNDS"] ?? (quick ? 2 : 6))
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => void stopAll().finally(() => process.exit(130)))
  const abortListenerWarnings = countAbortListenerWarnings()
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-eras-"))
  try {
    buildStore()
    const cells = await runEras(dir, { calls, rounds, log: (line) => console.log(line) })
    const { execFileSync } = await import("node:child_process")
    const git = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim()
    const section = erasMarkdown(cells, git, calls, rounds)
    console.log(`\n${section}`)
    if (abortListenerWarnings() > 0) console.log(`The in-process SDK clients drew ${abortListenerWarnings()} MaxListenersExceededWarnings (counted, not printed).`)
    if (values.write) writeErasSection(join(ROOT, "bench", "RESULTS.md"), section)
  } finally {
    await stopAll()
    rmSync(dir, { recursive: true, force: true })
  }
}
