/**
 * CPU profile of the store under load: a store process started with `node --cpu-prof`, the c=32
 * Streamable HTTP call_tool cell run against it, then the .cpuprofile (written when the store exits
 * on SIGTERM) summarized: self time per function and per module (package or source file), and total
 * (inclusive) time of the store's own functions, over the samples of the measured window only.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { startStoreWithFixtures, storeCallerFor, type Transport } from "./calls.js"
import { HttpClient, closedLoop, type RunResult } from "./load.js"
import { ROOT, SOURCES_SCRIPT, startStore, stopChild } from "./procs.js"

interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number; readonly columnNumber: number }
  readonly children?: ReadonlyArray<number>
}
export interface CpuProfile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly startTime: number
  readonly endTime: number
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

export interface Share {
  readonly name: string
  readonly ms: number
  /** Percent of the busy (non-idle) time in the window. */
  readonly percent: number
}

/** The samples of one time window of a profile, summarized. */
export interface ProfileWindow {
  readonly windowMs: number
  readonly busyMs: number
  readonly idleMs: number
  readonly topSelf: ReadonlyArray<Share>
  readonly byModule: ReadonlyArray<Share>
  /** Time with a frame of the module anywhere on the stack (synchronous stacks only: async work is attributed to the callback that runs it). */
  readonly byModuleTotal: ReadonlyArray<Share>
  /** Inclusive time of the store's own functions (src/). */
  readonly srcTotal: ReadonlyArray<Share>
  /** Busy time by layer (see LAYERS). */
  readonly byLayer: ReadonlyArray<Share>
}

export interface ProfileSummary extends ProfileWindow {
  readonly run: RunResult
  readonly file: string
  readonly transport?: Transport
}

const shortUrl = (url: string): string => {
  if (url === "") return ""
  const path = url.replace(/^file:\/\//, "")
  const nm = path.lastIndexOf("node_modules/")
  if (nm >= 0) return path.slice(nm + "node_modules/".length)
  if (path.startsWith(ROOT)) return path.slice(ROOT.length)
  return path
}

/** The module a frame belongs to: a package, a file of src/, node's internals, or a V8 pseudo-frame. */
const moduleOf = (frame: ProfileNode["callFrame"]): string => {
  const url = frame.url
  if (url === "") return frame.functionName.startsWith("(") ? frame.functionName : "(native)"
  if (url.startsWith("node:")) {
    // node:internal/webstreams/readablestream -> node:webstreams; node:_http_server -> node:_http_server
    const path = url.slice("node:".length).replace(/^internal\//, "")
    return `node:${path.split("/")[0]}`
  }
  const path = url.replace(/^file:\/\//, "")
  const nm = path.lastIndexOf("node_modules/")
  if (nm >= 0) {
    const rest = path.slice(nm + "node_modules/".length).split("/")
    return rest[0]!.startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]!
  }
  if (path.startsWith(ROOT)) return path.slice(ROOT.length)
  return path
}

/**
 * Which part of the work a module belongs to. A sample is put in the layer of the frame nearest its
 * leaf whose module has one; node internals, native functions and the like have none, so a socket
 * write counts for whoever wrote (the HTTP server's response, or the MCP client's request).
 */
const LAYERS: ReadonlyArray<readonly [string, (module: string) => boolean]> = [
  ["garbage collector", (m) => m === "(garbage collector)"],
  [
    "MCP client: src/mcp (transports, request wrapper), the SDK's Client, node http client, zod",
    (m) =>
      m.startsWith("src/mcp/") ||
      m === "@modelcontextprotocol/sdk" ||
      m === "node:_http_client" ||
      m === "node:_http_agent" ||
      m === "undici" ||
      m === "node:deps" ||
      m === "node:webstreams" ||
      m === "eventsource-parser" ||
      m === "zod"
  ],
  ["tool-call records: src/records (the record of every call, its line, its aggregates)", (m) => m.startsWith("src/records/")],
  ["metrics (prom-client)", (m) => m === "prom-client"],
  [
    "HTTP server and Effect runtime: src/http (the direct call route, guards, handlers), Effect and its platform, router, node http (server side and the parts it shares with the client)",
    (m) => m.startsWith("src/http/") || m === "effect" || m.startsWith("@effect/") || m === "find-my-way-ts" || m.startsWith("node:_http") || m === "node:http"
  ],
  ["store code (other src/, xstate, ajv)", (m) => m.startsWith("src/") || m === "xstate" || m === "ajv" || m === "ajv-formats"]
]
export const UNATTRIBUTED = "node internals, not attributable (event loop, microtasks, timers)"

const frameKey = (frame: ProfileNode["callFrame"]): string => {
  const where = shortUrl(frame.url)
  // Code run through tsx is transformed: its positions are those of the transformed text.
  const position = where.startsWith("src/") ? `:${frame.lineNumber + 1}:${frame.columnNumber + 1}` : `:${frame.lineNumber + 1}`
  return `${frame.functionName || "(anonymous)"}${where ? ` ${where}${position}` : ""}`
}

/** Reads the one .cpuprofile a process wrote into `dir`. */
export const readProfile = (dir: string): { file: string; profile: CpuProfile } => {
  // CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile: thread 0 is the main thread (tsx's loader is another).
  const names = readdirSync(dir).filter((f) => f.endsWith(".cpuprofile"))
  const name = names.find((f) => f.split(".")[4] === "0") ?? names[0]
  if (name === undefined) throw new Error(`no .cpuprofile in ${dir} (the profiled process did not exit cleanly)`)
  return { file: join(dir, name), profile: JSON.parse(readFileSync(join(dir, name), "utf8")) as CpuProfile }
}

/** Summarizes the samples of a .cpuprofile whose time (ms from the profile's start) lies in [fromMs, toMs]. */
export const summarizeProfile = (profile: CpuProfile, fromMs: number, toMs: number, top = 15): ProfileWindow => {
  const byId = new Map<number, ProfileNode>(profile.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const self = new Map<string, number>()
  const modules = new Map<string, number>()
  const srcTotal = new Map<string, number>()
  const modulesTotal = new Map<string, number>()
  const layers = new Map<string, number>()
  let t = 0
  let busy = 0
  let idle = 0
  for (let i = 0; i < profile.samples.length; i++) {
    const delta = (profile.timeDeltas[i] ?? 0) / 1000
    t += delta
    if (t < fromMs || t > toMs) continue
    const node = byId.get(profile.samples[i]!)
    if (!node) continue
    if (node.callFrame.functionName === "(idle)") {
      idle += delta
      continue
    }
    busy += delta
    self.set(frameKey(node.callFrame), (self.get(frameKey(node.callFrame)) ?? 0) + delta)
    const mod = moduleOf(node.callFrame)
    modules.set(mod, (modules.get(mod) ?? 0) + delta)
    const seen = new Set<string>()
    const seenModules = new Set<string>()
    let layer: string | undefined
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const frame = byId.get(id)!.callFrame
      const module = moduleOf(frame)
      layer ??= LAYERS.find(([, test]) => test(module))?.[0]
      if (!seenModules.has(module) && !module.startsWith("(")) {
        seenModules.add(module)
        modulesTotal.set(module, (modulesTotal.get(module) ?? 0) + delta)
      }
      if (!module.startsWith("src/") || frame.functionName === "") continue
      const key = frameKey(frame)
      if (seen.has(key)) continue
      seen.add(key)
      srcTotal.set(key, (srcTotal.get(key) ?? 0) + delta)
    }
    layer ??= UNATTRIBUTED
    layers.set(layer, (layers.get(layer) ?? 0) + delta)
  }
  const shares = (m: Map<string, number>, n: number): Share[] =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, ms]) => ({ name, ms, percent: (100 * ms) / Math.max(busy, 1e-9) }))
  return {
    windowMs: toMs - fromMs,
    busyMs: busy,
    idleMs: idle,
    topSelf: shares(self, top),
    byModule: shares(modules, top),
    byModuleTotal: shares(modulesTotal, top),
    byLayer: shares(layers, LAYERS.length + 1),
    srcTotal: shares(srcTotal, top)
  }
}

/** Runs one store cell (e.g. c=32 over Streamable HTTP) against a store under `node --cpu-prof` and summarizes the profile. */
export const profileStoreCell = async (
  dir: string,
  httpUrl: string,
  options: { transport: Transport; calls: number; warmup: number; concurrency: number; maxSeconds: number }
): Promise<ProfileSummary> => {
  const profDir = join(dir, "cpuprofile")
  mkdirSync(profDir, { recursive: true })
  const store = await startStoreWithFixtures(dir, httpUrl, { nodeArgs: ["--cpu-prof", `--cpu-prof-dir=${profDir}`], name: "store (profiled)", script: SOURCES_SCRIPT })
  const http = new HttpClient(store.url, options.concurrency)
  const call = storeCallerFor(http, options.transport)
  let from = 0
  let to = 0
  let run: RunResult
  try {
    // Warm-up first (not in the window), then the measured calls.
    await closedLoop((i) => call(`pw-${i}`), { concurrency: options.concurrency, calls: 0, warmup: options.warmup, maxSeconds: options.maxSeconds })
    from = performance.now() - store.child.spawnedAt
    run = await closedLoop((i) => call(`p-${i}`), { concurrency: options.concurrency, calls: options.calls, warmup: 0, maxSeconds: options.maxSeconds })
    to = performance.now() - store.child.spawnedAt
  } finally {
    http.close()
    await stopChild(store.child, 15_000)
  }
  const { file, profile } = readProfile(profDir)
  // The profile starts when the process does, a moment after spawn: the window is trimmed a little.
  return { run, file, transport: options.transport, ...summarizeProfile(profile, from + 100, to - 50) }
}

/** Profiles one start of the store (empty services file): where the time to the first answer goes. */
export const profileStartup = async (dir: string): Promise<ProfileSummary & { readonly startMs: number }> => {
  const profDir = join(dir, "cpuprofile-startup")
  mkdirSync(profDir, { recursive: true })
  const configFile = join(dir, "startup-profile.json")
  writeFileSync(configFile, JSON.stringify({ mcpServers: {} }))
  const store = await startStore(configFile, { nodeArgs: ["--cpu-prof", `--cpu-prof-dir=${profDir}`], name: "store (start-up profiled)", script: SOURCES_SCRIPT })
  await stopChild(store.child, 15_000)
  const { file, profile } = readProfile(profDir)
  const summary = summarizeProfile(profile, 0, store.startMs, 15)
  const run = { count: 1, p50: store.startMs, p95: store.startMs, p99: store.startMs, max: store.startMs, mean: store.startMs, rate: 0, errors: 0, seconds: store.startMs / 1000, firstError: null, cut: false }
  return { run, file, startMs: store.startMs, ...summary }
}
