/**
 * Where the store's memory goes per service (not part of `npm run bench`: a heap snapshot takes a
 * while). Starts fixture processes and a store (`--heapsnapshot-signal=SIGUSR2`) with N services on
 * Streamable HTTP fixtures, waits until all are healthy, writes a heap snapshot, and prints the
 * resident memory and the heap's self size and object count by constructor, per service.
 *
 *   npx tsx bench/heap.ts [--services 200] [--agents 20] [--top 30]
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { HttpClient } from "./load.js"
import { memoryMb, startFixtures, startStore, stopAll, until } from "./procs.js"

const { values } = parseArgs({
  options: { services: { type: "string", default: "200" }, agents: { type: "string", default: "20" }, top: { type: "string", default: "30" } },
  strict: true
})
const SERVICES = Number(values.services)
const AGENTS = Number(values.agents)
const TOP = Number(values.top)

interface Snapshot {
  readonly snapshot: { readonly meta: { readonly node_fields: string[]; readonly node_types: [string[], ...unknown[]] } }
  readonly nodes: number[]
  readonly strings: string[]
}

const dir = mkdtempSync(join(tmpdir(), "mcp-store-heap-"))
process.once("SIGINT", () => void stopAll().finally(() => process.exit(130)))
try {
  const fixtures = await Promise.all([0, 1].map((i) => startFixtures(1, `fixtures-${i}`)))
  const urls = fixtures.flatMap((f) => f.urls)
  const agents: Record<string, { mcpServers: Record<string, { url: string }> }> = {}
  for (let i = 0; i < SERVICES; i++) {
    const agent = `agent-${i % AGENTS}`
    ;(agents[agent] ??= { mcpServers: {} }).mcpServers[`svc-${i}`] = { url: urls[i % urls.length]! }
  }
  const file = join(dir, "mcp.json")
  writeFileSync(file, JSON.stringify({ mcpServers: {}, agents }, null, 2))
  const store = await startStore(file, { nodeArgs: ["--heapsnapshot-signal=SIGUSR2"], readyTimeoutMs: 60_000 })
  const http = new HttpClient(store.url, 2)
  await until(
    "all healthy",
    async () => {
      const res = await http.get("/monitoring/services_status_distribution")
      return ((res.body as { distribution?: { healthy?: number } }).distribution?.healthy ?? 0) >= SERVICES
    },
    120_000,
    100
  )
  http.close()
  await new Promise((r) => setTimeout(r, 3_000))
  const rss = memoryMb(store.child.pid).rss
  // The snapshot is written into the store's working directory (the repository): moved out below.
  const cwd = process.cwd()
  const before = new Set(readdirSync(cwd))
  process.kill(store.child.pid, "SIGUSR2")
  let snapshotFile = ""
  await until(
    "the heap snapshot",
    async () => {
      const name = readdirSync(cwd).find((f) => f.endsWith(".heapsnapshot") && !before.has(f))
      if (!name) return false
      const size = statSync(join(cwd, name)).size
      await new Promise((r) => setTimeout(r, 1_000))
      if (statSync(join(cwd, name)).size !== size || size === 0) return false
      snapshotFile = join(cwd, name)
      return true
    },
    300_000,
    500
  )
  const snap = JSON.parse(readFileSync(snapshotFile, "utf8")) as Snapshot
  rmSync(snapshotFile)
  const fields = snap.snapshot.meta.node_fields
  const types = snap.snapshot.meta.node_types[0]
  const width = fields.length
  const [iType, iName, iSize] = [fields.indexOf("type"), fields.indexOf("name"), fields.indexOf("self_size")]
  const groups = new Map<string, { size: number; count: number }>()
  let total = 0
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + iType]!]!
    const size = snap.nodes[i + iSize]!
    total += size
    const name = type === "object" || type === "closure" ? `${type}: ${snap.strings[snap.nodes[i + iName]!]}` : `(${type})`
    const g = groups.get(name) ?? { size: 0, count: 0 }
    g.size += size
    g.count += 1
    groups.set(name, g)
  }
  console.log(`${SERVICES} services healthy: RSS ${rss.toFixed(0)} MB, heap snapshot ${(total / 1024 ** 2).toFixed(0)} MB of live objects (${((total / SERVICES) / 1024).toFixed(0)} KB per service)`)
  console.log(`${"self MB".padStart(8)} ${"KB/svc".padStart(7)} ${"count".padStart(9)} ${"per svc".padStart(8)}  constructor`)
  for (const [name, g] of [...groups].sort((a, b) => b[1].size - a[1].size).slice(0, TOP)) {
    console.log(
      `${(g.size / 1024 ** 2).toFixed(1).padStart(8)} ${(g.size / 1024 / SERVICES).toFixed(1).padStart(7)} ${String(g.count).padStart(9)} ${(g.count / SERVICES).toFixed(1).padStart(8)}  ${name.slice(0, 90)}`
    )
  }
} finally {
  await stopAll()
  rmSync(dir, { recursive: true, force: true })
}
