// --reload with a broken edit: unparsable JSON is refused with a log line and the running services
// keep running; an edit with invalid entries is applied in part: the valid changes are made, each
// invalid entry is named in the log with its reason, and no running service is lost to it.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { statusOf } from "../../src/machines/service.js"
import { awaitSnapshotPromise as awaitSnapshot } from "../../src/runtime/bridge.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { createStore } from "../../src/composition/layer-graph.js"
import type { Store } from "../../src/runtime/store.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, FAST_MONITORING } from "../support/index.js"

let store: Store | undefined
let fixture: HttpFixture | undefined
let dir: string | undefined
let logs: CapturedLogs | undefined

afterEach(async () => {
  await store?.stop()
  await fixture?.stop()
  logs?.restore()
  if (dir) rmSync(dir, { recursive: true, force: true })
  store = fixture = dir = logs = undefined
})

const healthy = (s: Store, name: string) =>
  awaitSnapshot(s.serviceActor(STORE_SCOPE, name)!, (snap) => statusOf(snap) === "healthy", { timeoutMs: 10_000 })

describe("--reload with a broken edit", { timeout: 30_000 }, () => {
  it("refuses unparsable JSON with a log line, then applies the valid part of an edit with invalid entries", async () => {
    fixture = await startHttpFixture()
    dir = mkdtempSync(join(tmpdir(), "mcp-store-reload-problems-"))
    const file = join(dir, "mcp.json")
    const url = fixture.url
    writeFileSync(file, JSON.stringify({ mcpServers: { one: { url }, two: { url }, three: { url } } }))
    logs = captureLogs({ level: "info" })
    store = await createStore({ mcpConfigFile: file, monitoring: FAST_MONITORING })
    for (const name of ["one", "two", "three"]) expect((await healthy(store, name)).end).toBe("reached")
    const actors = ["one", "two", "three"].map((n) => store!.serviceActor(STORE_SCOPE, n))
    const applied: Array<{ added: string[]; updated: string[]; removed: string[] }> = []
    store.watchFile((s) => applied.push(s))

    // Not JSON: refused, said so, nothing stopped.
    writeFileSync(file, '{"mcpServers": {"one": {"url": ')
    expect(await eventually(() => logs!.lines.some((l) => /reload refused: .*not valid JSON/.test(l)), 5_000)).toBe(true)
    expect(["one", "two", "three"].map((n) => store!.serviceActor(STORE_SCOPE, n))).toEqual(actors)

    // Valid changes and invalid entries in one edit: "four" added, "two" turned into a string (left
    // out: it keeps running), "three" given "args": 5 (not applied: it keeps running as it was),
    // "bad name" left out, "five" new and invalid (loaded, unreachable with its reason).
    writeFileSync(
      file,
      JSON.stringify({
        mcpServers: { one: { url }, two: "oops", three: { url, args: 5 }, four: { url }, "bad name": { url }, five: { url: "ftp://x/mcp" } }
      })
    )
    expect(await eventually(() => applied.length > 0, 5_000)).toBe(true)
    expect(applied[0]).toEqual({ added: ["four", "five"], updated: [], removed: [] })
    expect((await healthy(store, "four")).end).toBe("reached")
    expect(store.serviceActor(STORE_SCOPE, "two")).toBe(actors[1])
    expect(store.serviceActor(STORE_SCOPE, "three")).toBe(actors[2])
    expect(statusOf(actors[2]!.getSnapshot())).toBe("healthy")
    expect(actors[2]!.getSnapshot().context.definition).toEqual({ url })
    expect(store.serviceActor(STORE_SCOPE, "bad name")).toBeUndefined()
    const five = store.serviceActor(STORE_SCOPE, "five")!
    expect(await eventually(() => five.getSnapshot().context.lastError !== undefined, 5_000)).toBe(true)
    expect(five.getSnapshot().context.lastError).toMatch(/http/)
    const lines = logs.lines.join("\n")
    expect(lines).toMatch(/mcpServers\."two": must be an object \(a service definition\) \(not loaded\)/)
    expect(lines).toMatch(/mcpServers\."three": "args" .* \(loaded as unreachable\)/)
    expect(lines).toMatch(/the edit of three is not applied \(.*args.*\); it keeps running as it was/)
    expect(lines).toMatch(/mcpServers\."bad name": service name "bad name" .* \(not loaded\)/)
    expect(lines).toMatch(/mcpServers\."five": unsupported URL scheme ftp: use http or https \(loaded as unreachable\)/)

    // The same problems are not logged again on the next edit; a fixed entry is applied.
    const before = logs.lines.filter((l) => l.includes('mcpServers."two"')).length
    writeFileSync(file, JSON.stringify({ mcpServers: { one: { url }, two: "oops", three: { url }, four: { url } } }))
    expect(await eventually(() => store!.serviceActor(STORE_SCOPE, "five") === undefined, 5_000)).toBe(true)
    expect(logs.lines.filter((l) => l.includes('mcpServers."two"')).length).toBe(before)
    expect(store.serviceActor(STORE_SCOPE, "two")).toBe(actors[1])
  })
})
