// The mcp-store process itself (`mcp-store run api` from its bundle, spawnStore, a child of the test): killed with
// SIGKILL in the middle of a burst of concurrent add_service and delete_service requests, the
// services file must still be valid JSON holding every acknowledged change (and the store must start
// from it); with its stderr closed (the reader went away), it neither spins nor hangs, and SIGTERM
// still ends it; killed with SIGKILL, the stdio server's processes it leaves are ended by the next
// store on the folder (and only they); stopped with SIGTERM while wait_service requests and event
// streams are open, it must exit within 10 s with code 0 and every child process (stdio servers and a
// grandchild that ignores SIGTERM) ended.
//
// A store start costs about a second of CPU, so a store serves every check that does not need one of
// its own: the store started from the burst's last file is then the one whose stderr is closed, and
// the store that ends the killed store's processes is then the one stopped with SIGTERM.
// The tests run at the same time (describe.concurrent), each with its own folder and store
// processes, ended when it finishes; they share the HTTP fixture their services connect to.
import { spawn } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it, type TestContext } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { stdioFixture } from "../fixtures/paths.js"
import {
  api,
  eventually,
  firstText,
  killGroup,
  liveGroupMembers,
  openRequest,
  openSse,
  processGone,
  spawnStore,
  within,
  type SseStream,
  type StoreProcess
} from "../support/index.js"

let http: HttpFixture

beforeAll(async () => {
  http = await startHttpFixture()
})
afterAll(async () => {
  await http?.stop()
}, 15_000)

/** What one test started: its folder, its store processes, the process groups it saw. */
interface Own {
  readonly dir: string
  readonly stores: StoreProcess[]
  readonly groups: Set<number>
}

/** A fresh folder and the test's own lists, ended when it finishes (its own hook: the tests run at the same time). */
const own = ({ onTestFinished }: TestContext, prefix: string): Own => {
  const o: Own = { dir: mkdtempSync(join(tmpdir(), prefix)), stores: [], groups: new Set() }
  onTestFinished(async () => {
    await Promise.all(o.stores.map((s) => s.kill()))
    for (const pgid of o.groups) killGroup(pgid)
    rmSync(o.dir, { recursive: true, force: true })
  }, 20_000)
  return o
}

const start = async (o: Own, configFile: string, monitoring = {}, extraArgs: ReadonlyArray<string> = []) => {
  const store = await spawnStore({ configFile, monitoring, extraArgs })
  o.stores.push(store)
  return store
}

type Scope = "store" | "agent"
interface Op {
  readonly kind: "add" | "delete"
  readonly scope: Scope
  readonly name: string
  /** Status code, or 0 when the connection broke (the kill). Undefined while in flight. */
  status?: number
}

const AGENT = "burst-agent"
const base = (scope: Scope) => (scope === "store" ? "/for_store" : `/for_agent/${AGENT}`)

/** Names of a services file by scope. */
const namesIn = (doc: { mcpServers?: Record<string, unknown>; agents?: Record<string, { mcpServers?: Record<string, unknown> }> }) => ({
  store: new Set(Object.keys(doc.mcpServers ?? {})),
  agent: new Set(Object.keys(doc.agents?.[AGENT]?.mcpServers ?? {}))
})

describe.concurrent("SIGKILL of mcp-store during a burst of add_service and delete_service; then a closed log pipe", () => {
  it("three rounds: the file stays valid JSON, holds every acknowledged change, and the store starts from it; that store, its stderr closed, neither spins nor hangs: SIGTERM ends it with code 0", { timeout: 120_000 }, async (context) => {
    const o = own(context, "mcp-store-burst-")
    const { dir } = o
    const file = join(dir, "mcp.json")
    // Disabled: the test is about the file, and a store connecting a hundred services on each start
    // would spend most of the test's CPU on that.
    const seeds = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`seed-${i}`, { url: http.url, disabled: true }]))
    writeFileSync(file, `${JSON.stringify({ mcpServers: seeds, agents: { [AGENT]: { mcpServers: { "agent-seed": { url: http.url, disabled: true } } } } }, null, 2)}\n`)
    let counter = 0
    const summary: string[] = []
    // Kill after this many acknowledged requests (of 200), in three rounds on the same file.
    for (const [round, killAfter] of [[1, 40], [2, 110], [3, 170]] as const) {
      const before = namesIn(JSON.parse(readFileSync(file, "utf8")))
      const store = await start(o, file, { health_check_seconds: 30 })
      const ops: Op[] = []
      const present = { store: new Set(before.store), agent: new Set(before.agent) }
      const deleting = new Set<string>()
      let acked = 0
      let killed = false
      const next = (): Op | undefined => {
        if (ops.length >= 200 || killed) return undefined
        const scope: Scope = Math.random() < 0.25 ? "agent" : "store"
        const candidates = [...present[scope]].filter((n) => !deleting.has(`${scope}/${n}`))
        const op: Op =
          Math.random() < 0.4 && candidates.length > 0
            ? { kind: "delete", scope, name: candidates[Math.floor(Math.random() * candidates.length)]! }
            : { kind: "add", scope, name: `svc-${round}-${counter++}` }
        if (op.kind === "delete") deleting.add(`${scope}/${op.name}`)
        ops.push(op)
        return op
      }
      const client = api(store.url)
      const worker = async () => {
        for (let op = next(); op !== undefined; op = next()) {
          try {
            const reply =
              op.kind === "add"
                ? await client.post(`${base(op.scope)}/add_service`, { name: op.name, url: http.url, disabled: true })
                : await client.del(`${base(op.scope)}/delete_service/${op.name}`)
            op.status = reply.status
          } catch {
            op.status = 0
          }
          if (op.status === 200) {
            acked += 1
            if (op.kind === "add") present[op.scope].add(op.name)
            else present[op.scope].delete(op.name)
            if (acked === killAfter) {
              // In the middle of the burst: 15 other requests are in flight right now.
              killed = true
              store.child.kill("SIGKILL")
            }
          }
        }
      }
      await Promise.all(Array.from({ length: 16 }, worker))
      const exit = await store.exited
      expect(exit.signal).toBe("SIGKILL")

      // The file parses, and holds every acknowledged change.
      const text = readFileSync(file, "utf8")
      const doc = JSON.parse(text)
      const after = namesIn(doc)
      const missing: string[] = []
      const resurrected: string[] = []
      const deleteIssued = (scope: Scope, name: string) => ops.some((o) => o.kind === "delete" && o.scope === scope && o.name === name)
      for (const op of ops) {
        if (op.status !== 200) continue
        // An acknowledged add must be there, unless a delete of it was sent (acknowledged: checked
        // below; in flight at the kill: either outcome is right).
        if (op.kind === "add" && !after[op.scope].has(op.name) && !deleteIssued(op.scope, op.name)) missing.push(`${op.scope}/${op.name}`)
        if (op.kind === "delete" && after[op.scope].has(op.name)) resurrected.push(`${op.scope}/${op.name}`)
      }
      // Services present before the round and never touched by an acknowledged delete must still be there.
      for (const scope of ["store", "agent"] as const) {
        for (const name of before[scope]) {
          if (!deleteIssued(scope, name) && !after[scope].has(name)) missing.push(`${scope}/${name} (from before the round)`)
        }
      }
      expect({ missing, resurrected }).toEqual({ missing: [], resurrected: [] })
      const statuses = ops.reduce<Record<string, number>>((m, o) => ((m[String(o.status)] = (m[String(o.status)] ?? 0) + 1), m), {})
      // Every request was answered 200 (or 404 for nothing) until the kill; the rest lost their connection.
      expect(Object.keys(statuses).filter((s) => s !== "200" && s !== "0")).toEqual([])
      const leftovers = readdirSync(dir).filter((f) => f.endsWith(".tmp"))
      summary.push(
        `round ${round}: ${ops.length} requests sent, ${acked} acknowledged, ${statuses["0"] ?? 0} cut by the kill; ` +
          `file: ${after.store.size} store + ${after.agent.size} agent services; temporary files left: ${leftovers.length}`
      )
    }

    // The store starts from the file the last kill left, with exactly the services it holds (logging
    // at info: the closed log pipe below needs lines to write).
    const doc = JSON.parse(readFileSync(file, "utf8"))
    const store = await start(o, file, { health_check_seconds: 30 }, ["--log-level", "info"])
    const listed = await store.get("/for_store/list_services?scope=all")
    expect(listed.status).toBe(200)
    const byScope = (scope: string) => listed.body.services.filter((s: { scope: string }) => s.scope === scope).map((s: { name: string }) => s.name).sort()
    expect(byScope("store")).toEqual([...namesIn(doc).store].sort())
    expect(byScope(AGENT)).toEqual([...namesIn(doc).agent].sort())
    console.log(summary.join("\n"))
    // A kill in the middle of a write leaves its temporary file (a full copy of the services file,
    // secrets included); a new start should not keep those of processes that are gone.
    const stale = readdirSync(dir).filter((f) => /^\.mcp\.json\.\d+\.[0-9a-f]+\.tmp$/.test(f) && Number(f.split(".")[3]) !== store.pid)
    expect(stale).toEqual([])

    // A closed log pipe: the store's stderr reader goes away (`mcp-store ... 2>&1 | head -1`), and
    // every log line fails with EPIPE. Before the logger listened for that, each failure was an
    // uncaught exception whose report was one more failing line: the process spun on a core and
    // never ended on SIGTERM.
    store.child.stderr?.destroy()
    // Lines to write into the closed pipe: a refused change is logged at info.
    for (let i = 0; i < 3; i++) expect((await store.post("/for_store/add_service", { name: "bad name!", url: http.url })).status).toBe(400)
    expect((await store.get("/health")).status).toBe(200)
    store.child.kill("SIGTERM")
    const exit = await within(store.exited, 10_000, "exit after SIGTERM").catch(() => undefined)
    expect(exit, "mcp-store still running 10 s after SIGTERM with its stderr closed").toBeDefined()
    expect({ code: exit!.code, signal: exit!.signal }).toEqual({ code: 0, signal: null })
  })
})

describe.concurrent("a store killed before it could end its local services; the next one stopped with SIGTERM", () => {
  /** The start time /proc gives a process (field 22 of its stat). */
  const startOf = (pid: number): string => {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] as string
  }
  /** A `sleep` leading a process group of its own, as a stdio server's group is. */
  const sleeper = (o: Own): number => {
    const child = spawn("sleep", ["60"], { detached: true, stdio: "ignore" })
    child.unref()
    o.groups.add(child.pid as number)
    return child.pid as number
  }
  const ledgers = (dir: string) => readdirSync(dir).filter((f) => /^\.mcp\.json\.processes\.\d+\.[0-9a-f]{12}\.json$/.test(f))

  it("SIGKILL leaves the stdio server's group running; the next store on the folder ends it, and only the groups that are still the killed store's; that store, stopped with SIGTERM while wait_service requests and event streams are open, exits within 10 s with code 0, its stdio servers and their grandchild (which ignores SIGTERM) ended", { timeout: 70_000 }, async (context) => {
    const o = own(context, "mcp-store-orphans-")
    const file = join(o.dir, "mcp.json")
    const gc = stdioFixture("--spawn-grandchild", "--grandchild-ignores-sigterm")
    writeFileSync(file, JSON.stringify({ mcpServers: { gc: { command: gc.command, args: gc.args } } }))
    const first = await start(o, file)
    expect((await first.post("/for_store/wait_service", { client_id_or_service_name: "gc", status: "healthy", timeout: 20 })).body.data.result).toBe(true)
    const serverPid = Number(firstText((await first.post("/for_store/call_tool", { tool_name: "gc__pid" })).body.content))
    const grandchild = Number(firstText((await first.post("/for_store/call_tool", { tool_name: "gc__grandchild_pid" })).body.content))
    o.groups.add(serverPid)
    // The store noted the group in its ledger beside the services file.
    const noted = async () => ledgers(o.dir).some((f) => readFileSync(join(o.dir, f), "utf8").includes(`"pgid":${serverPid}`))
    expect(await eventually(noted, 5_000)).toBe(true)
    const [killedLedger] = ledgers(o.dir)

    // Beside it: the ledger of a store that still runs (this test's process) and one of a dead store
    // whose group's id now belongs to another process (a start time that is not the one noted).
    const alive = sleeper(o)
    const reused = sleeper(o)
    writeFileSync(join(o.dir, ".mcp.json.processes.1.aaaaaaaaaaaa.json"), JSON.stringify({ owner: { pid: process.pid, start: startOf(process.pid) }, groups: [{ pgid: alive, start: startOf(alive), command: "sleep" }] }))
    writeFileSync(join(o.dir, ".mcp.json.processes.2.bbbbbbbbbbbb.json"), JSON.stringify({ owner: { pid: first.pid, start: "1" }, groups: [{ pgid: reused, start: "1", command: "sleep" }] }))
    // And a symlink named as a ledger, to a dead store's ledger that names a live group: never followed.
    const planted = sleeper(o)
    writeFileSync(join(o.dir, "elsewhere.json"), JSON.stringify({ owner: { pid: first.pid, start: "1" }, groups: [{ pgid: planted, start: startOf(planted), command: "sleep" }] }))
    symlinkSync(join(o.dir, "elsewhere.json"), join(o.dir, ".mcp.json.processes.3.cccccccccccc.json"))

    first.child.kill("SIGKILL")
    await first.exited
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(processGone(grandchild), "the grandchild outlives the killed store").toBe(false)

    // The next store's services: the same `gc`, a URL service, and an agent's stdio server (added
    // now: the killed store ran `gc` alone, so its ledger names that one group).
    const plain = stdioFixture()
    writeFileSync(
      file,
      JSON.stringify({
        mcpServers: { gc: { command: gc.command, args: gc.args }, remote: { url: http.url } },
        agents: { a1: { mcpServers: { local: { command: plain.command, args: plain.args } } } }
      })
    )
    const second = await start(o, file, { health_check_seconds: 0.5 }, ["--log-level", "warn"])
    expect(second.output()).toMatch(/ended 1 local service process group\(s\) left running by a store that ended without stopping them \(pid \d+\): node \(pid \d+\)/)
    expect(liveGroupMembers(serverPid)).toEqual([])
    expect(processGone(grandchild)).toBe(true)
    expect(processGone(alive) || processGone(reused) || processGone(planted)).toBe(false)
    // The killed store's ledger and the dead one's are gone; the live one's is left, and the new store keeps its own.
    const left = ledgers(o.dir)
    expect(left).not.toContain(killedLedger)
    expect(left).not.toContain(".mcp.json.processes.2.bbbbbbbbbbbb.json")
    expect(left).toContain(".mcp.json.processes.1.aaaaaaaaaaaa.json")
    expect(left).toContain(".mcp.json.processes.3.cccccccccccc.json")
    expect(second.output()).toMatch(/process ledger \S+cccccccccccc\.json cannot be read: left alone/)
    for (const [prefix, name] of [["/for_store", "gc"], ["/for_store", "remote"], ["/for_agent/a1", "local"]] as const) {
      const ready = await second.post(`${prefix}/wait_service`, { client_id_or_service_name: name, status: "healthy", timeout: 20 })
      expect(ready.body.data.result).toBe(true)
    }
    const pidOf = async (prefix: string, tool: string) =>
      Number(firstText((await second.post(`${prefix}/call_tool`, { tool_name: tool })).body.content))
    const newPid = await pidOf("/for_store", "gc__pid")
    const newGrandchild = await pidOf("/for_store", "gc__grandchild_pid")
    const localPid = await pidOf("/for_agent/a1", "local__pid")
    o.groups.add(newPid).add(localPid)
    expect(liveGroupMembers(newPid).sort()).toEqual([newPid, newGrandchild].sort())
    expect(await eventually(() => ledgers(o.dir).some((f) => readFileSync(join(o.dir, f), "utf8").includes(`"pgid":${newPid}`)), 5_000)).toBe(true)

    // SIGTERM while waits that would last a minute and event streams that never end by themselves are open.
    const waits = [
      openRequest(`${second.url}/for_store/wait_service`, { client_id_or_service_name: "gc", status: "disconnected", timeout: 60 }),
      openRequest(`${second.url}/for_store/wait_service`, { client_id_or_service_name: "remote", status: ["unreachable"], timeout: 60 }),
      openRequest(`${second.url}/for_agent/a1/wait_service`, { client_id_or_service_name: "local", status: "disconnected", timeout: 60 })
    ]
    const streams: SseStream[] = await Promise.all(
      [`${second.url}/events`, `${second.url}/events?agent_id=a1`, `${second.url}/inspect/events`].map((url) => openSse(url))
    )
    try {
      expect(streams.map((s) => s.status)).toEqual([200, 200, 200])
      // The waits are in the store's hands: every request has been written to its socket.
      await Promise.all(waits.map((w) => w.sent))
      const open = await second.get("/monitoring/active_connections")
      expect(open.body.event_subscribers).toBeGreaterThanOrEqual(2)

      second.child.kill("SIGTERM")
      const exit = await within(second.exited, 10_000, "exit after SIGTERM").catch(() => undefined)
      expect(exit, `mcp-store still running 10 s after SIGTERM:\n${second.output()}`).toBeDefined()
      expect({ code: exit!.code, signal: exit!.signal }).toEqual({ code: 0, signal: null })

      // Every wait was answered or cut, every stream ended.
      await Promise.all(waits.map((w) => w.done))
      await Promise.all(streams.map((s) => s.ended))
      // No live process of either server's group, and the grandchild is gone.
      expect(liveGroupMembers(newPid)).toEqual([])
      expect(liveGroupMembers(localPid)).toEqual([])
      expect(processGone(newGrandchild)).toBe(true)
    } finally {
      for (const w of waits) w.close()
      for (const s of streams) s.close()
    }
    // Nothing the store started survives it (its pid is gone; nothing is reparented from it).
    expect(await eventually(() => processGone(second.pid), 1_000)).toBe(true)
    // A store that stops as asked removes its ledger with its processes.
    expect(ledgers(o.dir).sort()).toEqual([".mcp.json.processes.1.aaaaaaaaaaaa.json", ".mcp.json.processes.3.cccccccccccc.json"])
  })
})
