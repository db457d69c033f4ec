/**
 * The benchmark's output: the results of every section, the performance targets checked against
 * them, a plain-text table for stdout and bench/RESULTS.md (machine, Node version, date, load,
 * every figure, every ratio, the profiles). A hand-written block between the ANALYSIS markers of an
 * existing RESULTS.md is carried over into the new file.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { capsDescription, capsTable, type CapsResult } from "./caps.js"
import type { Cell, Transport, Way } from "./calls.js"
import type { ReadCell } from "./resources.js"
import type { ProgressResults } from "./progress.js"
import type { FloorCell } from "./floor.js"
import type { Latencies } from "./load.js"
import type { ProfileSummary, ProfileWindow, Share } from "./profile.js"
import type { ScaleResult, StartupFigures } from "./scale.js"
import type { WaitResult } from "./wait.js"

export interface Meta {
  readonly date: string
  readonly node: string
  readonly cpu: string
  readonly cores: number
  readonly memoryGb: number
  readonly kernel: string
  readonly mode: string
  readonly callsPerCell: number
  readonly warmup: number
  readonly concurrencies: ReadonlyArray<number>
  readonly loadBefore: string
  loadAfter: string
  readonly loads: Array<{ phase: string; load: string }>
  durationSeconds: number
  readonly hubVersion: string
  readonly storeVersion: string
  readonly git: string
}

export interface Results {
  readonly meta: Meta
  calls?: ReadonlyArray<Cell>
  /** resources/read: direct, the store's REST and /mcp (bench/resources.ts); each line logged with its ratio to direct. */
  resources?: ReadonlyArray<ReadCell>
  /** A call with 0 and 100 progress notifications: direct, REST, REST with /events, /mcp, and the floods (bench/progress.ts). */
  progress?: ProgressResults
  floor?: ReadonlyArray<FloorCell>
  /** A bare node:http client sending one request per service per 30 s: percent of one core. */
  idleFloor?: { readonly services: number; readonly percent: number }
  profile?: ProfileSummary
  profileStdio?: ProfileSummary
  wait?: WaitResult
  scale?: ScaleResult
  startup?: ReadonlyArray<StartupFigures>
  startupProfile?: ProfileSummary & { readonly startMs: number }
  bundleBuildMs?: number
  records?: string
  /** The caps under a flood (bench/caps.ts). */
  caps?: CapsResult
  /** MaxListenersExceededWarning of the benchmark process (its direct SDK client). */
  abortListenerWarnings?: number
  readonly failures: Array<{ section: string; error: string }>
}

export interface Target {
  readonly target: string
  readonly measured: string
  /** undefined when not measured. */
  readonly met: boolean | undefined
}

const f = (v: number, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : "-")
const ratio = (a: number, b: number, digits = 2) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? `${(a / b).toFixed(digits)}x` : "-")

const cell = (cells: ReadonlyArray<Cell>, t: Transport, c: number, w: Way) => cells.find((x) => x.transport === t && x.concurrency === c && x.way === w)

/** The HTTP floor (bench/floor.ts) beside the store's own cells. */
const floorSection = (floor: ReadonlyArray<FloorCell>, calls: ReadonlyArray<Cell>): string => {
  const rows = floor.map((x) => {
    const store = (t: Transport) => cell(calls, t, x.concurrency, "store")
    const direct = (t: Transport) => cell(calls, t, x.concurrency, "direct")
    return [
      String(x.concurrency),
      f(x.rate, 0),
      f(x.p50),
      f(x.p99),
      f(x.cpuUsPerCall, 0),
      ratio(store("http")?.rate ?? NaN, x.rate),
      ratio(store("stdio")?.rate ?? NaN, x.rate),
      ratio(x.rate, direct("stdio")?.rate ?? NaN)
    ]
  })
  return [
    `### The HTTP floor`,
    `A bare node:http server in its own process (bench/floor.ts) that parses each call's JSON body and answers a JSON body ` +
      `of the size of the store's answer, with nothing behind it, driven by the same load generator: the most any gateway ` +
      `that takes calls over HTTP can do on this machine. A direct stdio call never leaves the benchmark process, so ` +
      `"50 % of the direct throughput" over stdio is bounded by the last column.`,
    mdTable(["c", "calls/s", "p50 ms", "p99 ms", "server CPU us/call", "store HTTP / floor", "store stdio / floor", "floor / direct stdio"], rows)
  ].join("\n\n")
}

/** The performance targets ("at the floor, ahead of every peer"), checked. */
const floorTargets = (r: Results): Target[] => {
  const out: Target[] = []
  for (const t of ["http", "stdio"] as const) {
    const label = t === "http" ? "Streamable HTTP" : "stdio"
    const d = r.calls && cell(r.calls, t, 32, "direct")
    const s = r.calls && cell(r.calls, t, 32, "store")
    const h = r.calls && cell(r.calls, t, 32, "mcp-hub")
    const floor = r.floor?.find((x) => x.concurrency === 32)
    const sCpu = s?.cpuUsPerCall ?? NaN
    const hCpu = h?.cpuUsPerCall ?? NaN
    out.push({
      target: `c=32, ${label}: the store's CPU per call at most 0.5x mcp-hub's`,
      measured: s && h ? `${ratio(sCpu, hCpu)} (${f(sCpu, 0)} against ${f(hCpu, 0)} us)` : "not measured",
      met: s && h ? sCpu <= 0.5 * hCpu : undefined
    })
    out.push({
      target: `c=32, ${label}: at least 1.3 times mcp-hub's throughput`,
      measured: h && s ? `${ratio(s.rate, h.rate)} (${f(s.rate, 0)} against ${f(h.rate, 0)} calls/s)` : "not measured",
      met: h && s ? s.rate >= 1.3 * h.rate : undefined
    })
    const bound = floor && d ? 3 * (floor.cpuUsPerCall + d.benchCpuUsPerCall) : NaN
    out.push({
      target: `c=32, ${label}: the store's CPU per call at most 3 x (bare HTTP floor server + direct client)`,
      measured:
        s && floor && d
          ? `${f(sCpu, 0)} us against 3 x (${f(floor.cpuUsPerCall, 0)} + ${f(d.benchCpuUsPerCall, 0)}) = ${f(bound, 0)} us (${ratio(sCpu, bound / 3)} of the floor)`
          : "not measured",
      met: s && floor && d ? sCpu <= bound : undefined
    })
  }
  for (const t of ["http", "stdio"] as const) {
    const label = t === "http" ? "Streamable HTTP" : "stdio"
    const d = r.calls && cell(r.calls, t, 1, "direct")
    const s = r.calls && cell(r.calls, t, 1, "store")
    const h = r.calls && cell(r.calls, t, 1, "mcp-hub")
    const added = d && s ? s.p50 - d.p50 : NaN
    const hubAdded = d && h ? h.p50 - d.p50 : NaN
    out.push({
      target: `c=1, ${label}: the store adds at most 0.5 ms to the direct p50, and less than mcp-hub adds`,
      measured: d && s && h ? `${added >= 0 ? "+" : ""}${f(added)} ms (mcp-hub ${hubAdded >= 0 ? "+" : ""}${f(hubAdded)} ms)` : "not measured",
      met: d && s && h ? added <= 0.5 && added < hubAdded : undefined
    })
  }
  const sc = r.scale
  out.push({
    target: `idle with ${sc?.services ?? 1000} services: at most 1.5 times the bare client's idle floor`,
    measured: sc && r.idleFloor ? `${ratio(sc.idleCpuPercent, r.idleFloor.percent)} (${f(sc.idleCpuPercent)} % against ${f(r.idleFloor.percent)} %)` : "not measured",
    met: sc && r.idleFloor ? sc.idleCpuPercent <= 1.5 * r.idleFloor.percent : undefined
  })
  return out
}

/** Every performance target, checked. */
export const targets = (r: Results): Target[] => {
  const out: Target[] = []
  for (const t of ["http", "stdio"] as const) {
    const label = t === "http" ? "Streamable HTTP" : "stdio"
    const d1 = r.calls && cell(r.calls, t, 1, "direct")
    const s1 = r.calls && cell(r.calls, t, 1, "store")
    out.push({
      target: `c=1, ${label}: the store adds at most 1 ms to the direct p50`,
      measured: d1 && s1 ? `+${f(s1.p50 - d1.p50)} ms (${f(s1.p50)} against ${f(d1.p50)} ms)` : "not measured",
      met: d1 && s1 ? s1.p50 - d1.p50 <= 1 : undefined
    })
  }
  for (const t of ["http", "stdio"] as const) {
    const label = t === "http" ? "Streamable HTTP" : "stdio"
    const d = r.calls && cell(r.calls, t, 32, "direct")
    const s = r.calls && cell(r.calls, t, 32, "store")
    const h = r.calls && cell(r.calls, t, 32, "mcp-hub")
    const floor = r.floor?.find((x) => x.concurrency === 32)
    // Where even a bare HTTP round trip stays under half the direct rate, say so beside the figure.
    const bound = d && floor && floor.rate < 0.5 * d.rate ? `; the bare HTTP floor: ${f(floor.rate, 0)} calls/s, ${f((100 * floor.rate) / d.rate, 0)} %` : ""
    out.push({
      target: `c=32, ${label}: at least 50 % of the direct throughput`,
      measured: d && s ? `${f((100 * s.rate) / d.rate, 0)} % (${f(s.rate, 0)} against ${f(d.rate, 0)} calls/s${bound})` : "not measured",
      met: d && s ? s.rate >= 0.5 * d.rate : undefined
    })
    out.push({
      target: `c=32, ${label}: at least 2 times mcp-hub's throughput`,
      measured: h && s ? `${ratio(s.rate, h.rate)} (${f(s.rate, 0)} against ${f(h.rate, 0)} calls/s)` : "not measured",
      met: h && s ? s.rate >= 2 * h.rate : undefined
    })
  }
  out.push(...floorTargets(r))
  out.push({
    target: "wait_service reacts within 5 ms at p99",
    measured: r.wait ? `p99 ${f(r.wait.single.p99)} ms (p50 ${f(r.wait.single.p50)} ms, ${r.wait.single.count} waits)` : "not measured",
    met: r.wait ? r.wait.single.p99 <= 5 : undefined
  })
  const s = r.scale
  out.push({
    target: `${s?.services ?? 1000} services healthy within 10 s`,
    measured: s ? `${f(s.allHealthyMs / 1000)} s` : "not measured",
    met: s ? s.allHealthyMs <= 10_000 : undefined
  })
  const rss = s ? Math.max(s.rssMb, s.rssAfterIdleMb) : NaN
  out.push({ target: "at most 300 MB resident", measured: s ? `${f(rss, 0)} MB` : "not measured", met: s ? rss <= 300 : undefined })
  out.push({
    target: "at most 2 % of one core while idle (health checks every 30 s)",
    measured: s
      ? `${f(s.idleCpuPercent)} %${r.idleFloor ? ` (a bare node:http client sending the same ${f(r.idleFloor.services / 30, 1)} requests/s: ${f(r.idleFloor.percent)} %)` : ""}`
      : "not measured",
    met: s ? s.idleCpuPercent <= 2 : undefined
  })
  const all = s?.lists[0]
  out.push({
    target: `list_services with ${s?.services ?? 1000} services under 20 ms at p50`,
    measured: all ? `${f(all.latency.p50)} ms` : "not measured",
    met: all ? all.latency.p50 < 20 : undefined
  })
  for (const st of (r.startup ?? []).filter((x) => !x.experiment)) {
    out.push({ target: `start-up under 1 s, ${st.name}`, measured: `${f(st.latency.p50, 0)} ms (p50)`, met: st.latency.p50 < 1000 })
  }
  if (!r.startup) out.push({ target: "start-up under 1 s", measured: "not measured", met: undefined })
  return out
}

const mark = (met: boolean | undefined) => (met === undefined ? "?" : met ? "yes" : "NO")

// ---------------------------------------------------------------------------------------------
// Plain text for stdout

const textTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (r: ReadonlyArray<string>) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ")
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

export const callRows = (cells: ReadonlyArray<Cell>, concurrencies: ReadonlyArray<number>) => {
  const rows: string[][] = []
  for (const t of ["http", "stdio"] as const) {
    for (const c of concurrencies) {
      const d = cell(cells, t, c, "direct")
      const s = cell(cells, t, c, "store")
      const h = cell(cells, t, c, "mcp-hub")
      for (const [w, x] of [["direct", d], ["store", s], ["mcp-hub", h]] as const) {
        if (!x) continue
        rows.push([
          t === "http" ? "HTTP" : "stdio",
          String(c),
          w,
          String(x.count),
          f(x.rate, 0),
          f(x.p50),
          f(x.p95),
          f(x.p99),
          x.cpuUsPerCall === null ? "-" : f(x.cpuUsPerCall, 0),
          f(x.benchCpuUsPerCall, 0),
          x.fixtureCpuUsPerCall === null ? "-" : f(x.fixtureCpuUsPerCall, 0),
          String(x.errors) + (x.cut ? " (cut)" : "")
        ])
      }
    }
  }
  return rows
}
const CALL_HEADER = ["transport", "c", "way", "calls", "calls/s", "p50 ms", "p95 ms", "p99 ms", "CPU us/call", "bench CPU us/call", "fixture CPU us/call", "errors"]

export const ratioRows = (cells: ReadonlyArray<Cell>, concurrencies: ReadonlyArray<number>) => {
  const rows: string[][] = []
  for (const t of ["http", "stdio"] as const) {
    for (const c of concurrencies) {
      const d = cell(cells, t, c, "direct")
      const s = cell(cells, t, c, "store")
      const h = cell(cells, t, c, "mcp-hub")
      if (!d || !s || !h) continue
      rows.push([
        t === "http" ? "HTTP" : "stdio",
        String(c),
        ratio(s.rate, d.rate),
        ratio(s.p50, d.p50),
        `+${f(s.p50 - d.p50)}`,
        ratio(s.rate, h.rate),
        ratio(s.p50, h.p50),
        ratio(h.rate, d.rate)
      ])
    }
  }
  return rows
}
const RATIO_HEADER = [
  "transport",
  "c",
  "store/direct calls/s",
  "store/direct p50",
  "store-direct p50 ms",
  "store/mcp-hub calls/s",
  "store/mcp-hub p50",
  "mcp-hub/direct calls/s"
]

export const textReport = (r: Results): string => {
  const parts: string[] = []
  const m = r.meta
  parts.push(`mcp-store benchmark (${m.mode}) - ${m.date}, node ${m.node}, ${m.cores} x ${m.cpu}, load ${m.loadBefore} -> ${m.loadAfter}, ${f(m.durationSeconds, 0)} s`)
  if (r.calls) {
    parts.push(`\nTool-call overhead (echo; ${m.callsPerCell} calls per cell after a warm-up)\n${textTable(CALL_HEADER, callRows(r.calls, m.concurrencies))}`)
    parts.push(`\nRatios\n${textTable(RATIO_HEADER, ratioRows(r.calls, m.concurrencies))}`)
  }
  if (r.wait) {
    const w = r.wait
    parts.push(
      `\nwait_service reaction (status change -> answer received)\n${textTable(
        ["waiters per change", "waits", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [
          ["1", String(w.single.count), f(w.single.p50), f(w.single.p95), f(w.single.p99), f(w.single.max)],
          [String(w.fanoutWaiters), String(w.fanout.count), f(w.fanout.p50), f(w.fanout.p95), f(w.fanout.p99), f(w.fanout.max)]
        ]
      )}`
    )
  }
  if (r.scale) parts.push(`\nScale (${r.scale.services} services, ${r.scale.agents} agents)\n${textTable(["figure", "value"], scaleRows(r.scale))}`)
  if (r.startup) parts.push(`\nStart-up\n${textTable(["services file", "first answer p50 ms", "min", "max", "port open p50 ms", "runs"], startupRows(r.startup))}`)
  if (r.caps) {
    const { header, rows } = capsTable(r.caps)
    parts.push(`\nCaps under a flood\n${textTable(header, rows)}`)
  }
  parts.push(`\nTargets\n${textTable(["target", "measured", "met"], targets(r).map((t) => [t.target, t.measured, mark(t.met)]))}`)
  if (r.failures.length > 0) parts.push(`\nSections that failed:\n${r.failures.map((x) => `  ${x.section}: ${x.error}`).join("\n")}`)
  return parts.join("\n")
}

const scaleRows = (s: ScaleResult): string[][] => [
  ["first add_service -> all healthy", `${f(s.allHealthyMs, 0)} ms`],
  ["first add_service -> last add_service answered", `${f(s.addsAnsweredMs, 0)} ms`],
  ["resident memory, all healthy", `${f(s.rssMb, 0)} MB`],
  [`resident memory after ${s.idleSeconds} s idle (peak)`, `${f(s.rssAfterIdleMb, 0)} MB (${f(s.peakRssMb, 0)} MB)`],
  [`CPU while idle (${s.idleSeconds} s, health checks every 30 s, from ${s.settleSeconds} s after all healthy)`, `${f(s.idleCpuPercent)} % of one core`],
  [`CPU in the first ${s.settleSeconds} s after all healthy (each service's first check)`, `${f(s.settleCpuPercent)} % of one core`],
  ...s.lists.map((l) => [`${l.name} (${l.items} items) p50 / p95 / p99`, `${f(l.latency.p50)} / ${f(l.latency.p95)} / ${f(l.latency.p99)} ms`]),
  [
    "CPU while registering: store / fixture processes (wall)",
    `${f(s.registerCpu.store)} s / ${f(s.registerCpu.fixtures)} s (${f(s.registerCpu.wallSeconds)} s): ${f((1000 * s.registerCpu.store) / s.services)} ms of store CPU per service`
  ],
  ...(s.memory
    ? [[`JS heap used / heap total / external, after the idle window`, `${f(s.memory.heapUsedMb, 0)} / ${f(s.memory.heapTotalMb, 0)} / ${f(s.memory.externalMb, 0)} MB`]]
    : []),
  ["restart on the file: first answer (port open)", `${f(s.restartFirstAnswerMs, 0)} ms (${f(s.restartPortOpenMs, 0)} ms)`],
  ["restart on the file: all healthy", `${f(s.restartAllHealthyMs, 0)} ms`],
  ["restart on the file: resident memory, all healthy", `${f(s.restartRssMb, 0)} MB`],
  [
    "restart on the file: CPU to all healthy, store (start-up included) / fixture processes",
    `${f(s.restartCpu.store)} s / ${f(s.restartCpu.fixtures)} s (${f(s.restartCpu.wallSeconds)} s)`
  ]
]

const startupRows = (st: ReadonlyArray<StartupFigures>): string[][] =>
  st.map((x) => [x.name, f(x.latency.p50, 0), f(Math.min(...x.runs), 0), f(Math.max(...x.runs), 0), f(x.portOpen.p50, 0), String(x.runs.length)])

// ---------------------------------------------------------------------------------------------
// Markdown

const mdTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string =>
  [
    `| ${header.join(" | ")} |`,
    `|${header.map((_, i) => (i === 0 ? "---" : "---:")).join("|")}|`,
    ...rows.map((r) => `| ${r.map((c) => c.replaceAll("|", "\\|")).join(" | ")} |`)
  ].join("\n")

const shareRows = (shares: ReadonlyArray<Share>) => shares.map((s) => [`\`${s.name}\``, f(s.ms, 0), f(s.percent, 1)])

const latencyCells = (l: Latencies) => [f(l.p50), f(l.p95), f(l.p99), f(l.max)]

const LAYER_NOTE =
  `*Layer*: each sample goes to the layer of the frame nearest its leaf that has one (a socket write counts for ` +
  `whoever wrote); samples whose stack holds only node internals (continuations run from the microtask queue, ` +
  `timers) stay unattributed.`

/** The tables of one profile window: layers, modules (self and total), functions, the store's functions. */
const profileTables = (p: ProfileWindow, rows = 15, calls?: number): string =>
  [
    LAYER_NOTE,
    calls === undefined
      ? mdTable(["layer", "ms", "%"], shareRows(p.byLayer))
      : mdTable(
          ["layer", "ms", "%", "us per call"],
          p.byLayer.map((x) => [`\`${x.name}\``, f(x.ms, 0), f(x.percent, 1), f((1000 * x.ms) / Math.max(1, calls), 0)])
        ),
    `Self time by module (package, node internal subsystem, or file of src/), and total time (a frame of the module anywhere on the synchronous stack):`,
    mdTable(["module", "self ms", "%"], shareRows(p.byModule.slice(0, rows))),
    mdTable(["module", "total ms", "%"], shareRows(p.byModuleTotal.slice(0, rows))),
    `Top functions by self time:`,
    mdTable(["function", "self ms", "%"], shareRows(p.topSelf.slice(0, rows))),
    `The store's own named functions by total (inclusive) time (positions are in tsx's transformed code):`,
    mdTable(["function", "total ms", "%"], shareRows(p.srcTotal.slice(0, rows)))
  ].join("\n\n")

/**
 * Writes `section` (which starts with `start` and ends with `end`) into `file`: in place of the
 * block between those markers when the file has one, else appended at the end. The sections that
 * a cell can also write when run alone (the installed package, the replicas) use it.
 */
export const writeMarkedSection = (file: string, start: string, end: string, section: string): void => {
  const previous = existsSync(file) ? readFileSync(file, "utf8") : ""
  const a = previous.indexOf(start)
  const b = previous.indexOf(end)
  const next = a >= 0 && b > a ? `${previous.slice(0, a)}${section}${previous.slice(b + end.length)}` : `${previous.trimEnd()}\n\n${section}\n`
  writeFileSync(file, next)
}

export const ANALYSIS_START = "<!-- analysis:start -->"
export const ANALYSIS_END = "<!-- analysis:end -->"

export const markdownReport = (r: Results, analysis: string | undefined): string => {
  const m = r.meta
  const out: string[] = []
  out.push(`# mcp-store benchmark results`)
  out.push(
    `Written by \`npm run bench\` (bench/run.ts). Every server runs on 127.0.0.1 in its own process: the store ` +
      `(\`node dist/mcp-store.mjs run api\`, v${m.storeVersion}: the esbuild bundle that \`npm start\` runs, built from the measured sources at the start of the run${r.bundleBuildMs !== undefined ? ` in ${f(r.bundleBuildMs, 0)} ms` : ""}), the peer mcp-hub ${m.hubVersion} ` +
      `(\`POST /api/servers/tools\`), the fixture MCP servers (bench/fixtures.ts, test/fixtures/stdio-fixture.ts). ` +
      `The benchmark process generates the load (keep-alive node:http agent; the MCP SDK client for direct calls).`
  )
  out.push(`## Machine and run`)
  out.push(
    mdTable(
      ["", ""],
      [
        ["date", m.date],
        ["mode", m.mode],
        ["Node", m.node],
        ["CPU", `${m.cores} x ${m.cpu}`],
        ["memory", `${f(m.memoryGb, 1)} GB`],
        ["kernel", m.kernel],
        ["sources measured", `git ${m.git}`],
        ["load average (1, 5, 15 min) before", m.loadBefore],
        ["load average after", m.loadAfter],
        ["load average per phase (1 min)", m.loads.map((l) => `${l.phase} ${l.load}`).join("; ")],
        ["duration", `${f(m.durationSeconds, 0)} s`],
        ["calls per cell (after a warm-up of max(warm-up, 2 x c))", `${m.callsPerCell} (warm-up ${m.warmup})`]
      ]
    )
  )
  out.push(
    `The machine is shared: other engineers' test runs may load it during the run (see the load averages). ` +
      `The three ways of each cell run back to back in a rotating order, so such load hits them alike; ratios are more ` +
      `trustworthy than absolute figures.`
  )

  out.push(`## Targets`)
  out.push(mdTable(["target", "measured", "met"], targets(r).map((t) => [t.target, t.measured, mark(t.met)])))

  if (r.calls) {
    out.push(`## Tool-call overhead`)
    out.push(
      `The fixture's \`echo\` tool (\`{"text": "<distinct per call>"}\`), over Streamable HTTP (stateful, one session per ` +
        `client) and over stdio. *direct*: the MCP SDK client in the benchmark process, connected to the fixture. *store*: ` +
        `\`POST /for_store/call_tool\` \`{"tool_name": "echo", "service_name": ..., "args": ...}\`. *mcp-hub*: ` +
        `\`POST /api/servers/tools\` \`{"server_name", "tool", "arguments"}\`. The store and mcp-hub each hold their own ` +
        `session with the same HTTP fixture process and start their own stdio fixture process. Closed loop: c callers, each ` +
        `sending its next call when the previous one is answered. Latency in ms. *CPU us/call*: CPU time of the store or ` +
        `mcp-hub process per call (/proc utime+stime over the cell, warm-up included); *bench CPU*: the benchmark process ` +
        `(load generator; for *direct* also the SDK client); *fixture CPU*: the HTTP fixture server's process. The machine ` +
        `has ${m.cores} cores for all of them: no cell can go faster than ${m.cores} CPU-seconds per second divided by the sum of ` +
        `the CPU per call of the processes it involves.`
    )
    out.push(mdTable(CALL_HEADER, callRows(r.calls, m.concurrencies)))
    out.push(`### Ratios`)
    out.push(
      `calls/s ratios above 1 and p50 ratios below 1 favour the first named. *store-direct p50*: what the store adds to a call at the median.`
    )
    out.push(mdTable(RATIO_HEADER, ratioRows(r.calls, m.concurrencies)))
    if (r.floor) out.push(floorSection(r.floor, r.calls))
    if (r.abortListenerWarnings) {
      out.push(
        `Note: the benchmark's own direct SDK client drew ${r.abortListenerWarnings} \`MaxListenersExceededWarning\`s ` +
          `(over 1500 abort listeners on one AbortSignal): the SDK's Streamable HTTP client passes its transport-wide ` +
          `signal to every fetch, and Node's fetch adds a listener to it per request that goes only when the request ` +
          `is garbage-collected. mcp-hub's SDK client does the same; the store's Streamable HTTP transport ` +
          `(src/mcp/http-transport.ts) runs on node:http and does not.`
      )
    }
  }

  if (r.progress) {
    const pr = r.progress
    out.push(`## A call with progress (bench/progress.ts)`)
    out.push(
      `The HTTP fixture's \`progress\` tool (\`{"count": n}\`: n \`notifications/progress\` for the call's token, then the ` +
        `answer) with 0 and 100 notifications. *direct*: the MCP SDK client with \`onprogress\`. *store-rest*: \`call_tool\` ` +
        `(the store's own token upstream; nobody listens). *store-rest+events*: the same with one \`/events\` subscriber ` +
        `(\`progress\` events, at most one per call per 100 ms). *store-mcp*: an SDK client on \`/mcp\` with its own token. ` +
        `*added per notification*: (p50 at 100 - p50 at 0) / 100; *store CPU per notification*: the same with the store's CPU ` +
        `per call; *heard*: progress notifications (or events) the caller got per call of 100.`
    )
    const cell = (c: number, way: string, n: number) => pr.cells.find((x) => x.concurrency === c && x.way === way && x.notifications === n)
    out.push(
      mdTable(
        ["c", "way", "p50 ms (0)", "p50 ms (100)", "added per notification us", "store CPU per notification us", "heard per call"],
        pr.costs.map((x) => [
          String(x.concurrency),
          x.way,
          f(cell(x.concurrency, x.way, 0)?.p50 ?? NaN),
          f(cell(x.concurrency, x.way, 100)?.p50 ?? NaN),
          f(x.addedUsPerNotification, 1),
          x.cpuUsPerNotification === null ? "" : f(x.cpuUsPerNotification, 1),
          x.heardPerCall === null ? "" : f(x.heardPerCall, 1)
        ])
      )
    )
    out.push(`Floods: memory of the store while calls send many notifications (the \`/events\` subscriber reads nothing).`)
    out.push(
      mdTable(
        ["way", "calls x notifications", "seconds", "store RSS before MB", "after MB", "peak MB"],
        pr.floods.map((x) => [x.way, `${x.calls} x ${x.notificationsPerCall}`, f(x.seconds, 1), f(x.rssBeforeMb, 0), f(x.rssAfterMb, 0), f(x.peakMb, 0)])
      )
    )
  }

  for (const p of [r.profile, r.profileStdio]) {
    if (!p) continue
    const label = p.transport === "stdio" ? "stdio" : "Streamable HTTP"
    out.push(`## Profile: the store at c=32, ${label}`)
    out.push(
      `A separate store process run with \`node --cpu-prof\` from the sources through tsx (\`scripts/dev.mjs\`: the bundle ` +
        `would fold every frame into one file; the code run is the same), so profiling does not touch the figures above; the c=32 ` +
        `${label} cell run against it (${p.run.count} calls after a warm-up: ${f(p.run.rate, 0)} calls/s, p50 ${f(p.run.p50)} ms), ` +
        `samples of the measured window only: ${f(p.windowMs / 1000, 1)} s, of which the main thread was busy ` +
        `${f(p.busyMs / 1000, 1)} s (${f((100 * p.busyMs) / Math.max(1, p.windowMs), 0)} %) and idle ${f(p.idleMs / 1000, 1)} s: ` +
        `${f((1000 * p.busyMs) / Math.max(1, p.run.count), 0)} us of main-thread time per call. Percentages are of the busy time. ` +
        `Profile: \`${p.file}\` (temporary). *us per call* is under the profiler, whose sampling slows the process: compare layers with each other, not with the CPU per call of the tables above.`
    )
    out.push(profileTables(p, 15, p.run.count))
  }

  if (r.wait) {
    const w = r.wait
    out.push(`## wait_service reaction`)
    out.push(
      `One service on the HTTP fixture, cycled: waits for \`disconnected\` are sent and given 25 ms (plus 1 ms per waiter) to subscribe, then ` +
        `\`disconnect_service\`; waits for \`healthy\`, then \`restart_service\`. Reaction = the moment the benchmark ` +
        `receives the wait's answer minus the moment of the transition as the store recorded it (\`service_status\` ` +
        `transitions, whole milliseconds of the same system clock: figures are high by 0 to 1 ms). Waits that answered ` +
        `before the change (not yet subscribed) are left out: ${w.early}; failed: ${w.failures}.`
    )
    out.push(
      mdTable(
        ["waiters per status change", "waits", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [
          ["1", String(w.single.count), ...latencyCells(w.single)],
          ["1, waiting for healthy (restart_service)", String(w.singleByStatus.healthy.count), ...latencyCells(w.singleByStatus.healthy)],
          ["1, waiting for disconnected (disconnect_service)", String(w.singleByStatus.disconnected.count), ...latencyCells(w.singleByStatus.disconnected)],
          [String(w.fanoutWaiters), String(w.fanout.count), ...latencyCells(w.fanout)]
        ]
      )
    )
  }

  if (r.scale) {
    const s = r.scale
    out.push(`## Scale: ${s.services} services over ${s.agents} agents`)
    out.push(
      `${s.agents} agents with ${s.services / s.agents} services each (one \`POST /for_agent/{id}/add_service\` per agent, ` +
        `16 in flight), every service on a Streamable HTTP fixture: ${s.fixtureProcesses} fixture processes, ` +
        `${Math.round(s.services / s.fixtureProcesses)} sessions each. Health checks every 30 s. "All healthy" is seen by ` +
        `polling \`/monitoring/services_status_distribution\` every 50 ms. Memory is VmRSS of the store process; idle CPU ` +
        `is utime+stime over ${s.idleSeconds} s with no request at all, from ${s.settleSeconds} s after all are healthy: by then ` +
        `every service has had its first check, whose one-time work (its first metric series, its history) is not idle ` +
        `work; that first interval is reported on its own. list_tools has no all-scopes form, so it is ` +
        `measured for one agent of the full store.`
    )
    out.push(mdTable(["figure", "value"], scaleRows(s)))
    if (s.notes.length > 0) out.push(s.notes.map((n) => `- ${n}`).join("\n"))
    if (s.profileStart) {
      const p = s.profileStart
      out.push(`### Profile: start with ${s.services} services in the file, to all healthy`)
      out.push(
        `A third start of the store on the same file, under \`node --cpu-prof\` (its times are not the figures above). ` +
          `From process start to all healthy: ${f(p.windowMs / 1000, 1)} s, main thread busy ${f(p.busyMs / 1000, 1)} s ` +
          `(${f((100 * p.busyMs) / Math.max(1, p.windowMs), 0)} %). Profile: \`${p.file}\` (temporary).`
      )
      out.push(profileTables(p, 12))
    }
    if (s.profileIdle) {
      const p = s.profileIdle
      out.push(`### Profile: idle with ${s.services} healthy services`)
      out.push(
        `The same profiled process, ${f(p.windowMs / 1000, 0)} s with no request, from 2 s after all were healthy: main ` +
          `thread busy ${f(p.busyMs, 0)} ms (${f((100 * p.busyMs) / Math.max(1, p.windowMs), 2)} % of the window; the ` +
          `profiler's own sampling adds to this).`
      )
      out.push(profileTables(p, 12))
    }
    if (s.profileList) {
      const p = s.profileList
      out.push(`### Profile: list_services ?scope=all with ${s.services} services`)
      out.push(
        `The same profiled process answering ${s.lists[0]?.latency.count ?? "-"} \`GET /for_store/list_services?scope=all\` one at a ` +
          `time after the idle window: ${f(p.windowMs, 0)} ms, main thread busy ${f(p.busyMs, 0)} ms ` +
          `(${f(p.busyMs / Math.max(1, s.lists[0]?.latency.count ?? 1), 1)} ms per request).`
      )
      out.push(profileTables(p, 12))
    }
  }

  if (r.startup) {
    out.push(`## Start-up`)
    out.push(
      `From spawning \`node dist/mcp-store.mjs run api\` to the first answered \`GET /health\` (a new probe connection every ` +
        `10 ms, none given up: see the note on the open port below the table). *port open*: the first accepted connection. The demo ` +
        `file registers the local demo server (stdio); its row also gives the time to that service healthy: ` +
        `${r.startup.filter((x) => x.healthy).map((x) => `p50 ${f(x.healthy!.p50, 0)} ms`).join(", ") || "-"}.` +
        ` The last row runs the TypeScript sources through tsx (\`scripts/dev.mjs\`, as in development and the tests), for comparison.`
    )
    out.push(mdTable(["services file", "first answer p50 ms", "min", "max", "port open p50 ms", "runs"], startupRows(r.startup)))
    out.push(
      `Note on the open port: the port accepts connections before the store is built and its handler attached; a ` +
        `request in that gap is answered 503 SERVICE_UNAVAILABLE with Retry-After (src/http/server.ts). *First answer* ` +
        `is the first 200; the probe sends a new request every 10 ms on its own connection.`
    )
  }
  if (r.startupProfile) {
    const p = r.startupProfile
    out.push(`### Profile of one start (empty file, the sources through tsx: ${f(p.startMs, 0)} ms to the first answer)`)
    out.push(
      `Main thread from process start to the first answer: busy ${f(p.busyMs, 0)} ms, idle ${f(p.idleMs, 0)} ms (waiting ` +
        `on the tsx loader thread, files, timers). Self time by module and top functions:`
    )
    out.push(mdTable(["module", "self ms", "%"], shareRows(p.byModule.slice(0, 10))))
    out.push(mdTable(["function", "self ms", "%"], shareRows(p.topSelf.slice(0, 12))))
  }

  if (r.records) {
    out.push(`## Tool-call records (bench/records.ts)`)
    out.push("```\n" + r.records.trim() + "\n```")
  }

  if (r.caps) {
    const { header, rows } = capsTable(r.caps)
    out.push(`## Caps under a flood (bench/caps.ts)`)
    out.push(capsDescription(r.caps))
    out.push(mdTable(header, rows))
  }

  if (r.failures.length > 0) {
    out.push(`## Sections that failed`)
    out.push(r.failures.map((x) => `- ${x.section}: ${x.error}`).join("\n"))
  }

  out.push(`## Analysis and proposals`)
  out.push(
    analysis !== undefined
      ? `${ANALYSIS_START}${analysis}${ANALYSIS_END}`
      : `${ANALYSIS_START}\n_No analysis written yet for these figures._\n${ANALYSIS_END}`
  )
  return `${out.join("\n\n")}\n`
}
