// --reload: hand edits of the services file are applied to the running store, and only the services
// whose definition changed reconnect (real fixture servers; the store used as a library).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { agentScope, STORE_SCOPE } from "../../src/domain/service-definition.js"
import { statusOf } from "../../src/machines/service.js"
import { awaitSnapshotPromise as awaitSnapshot } from "../../src/runtime/bridge.js"
import { createStore } from "../../src/composition/layer-graph.js"
import type { Store } from "../../src/runtime/store.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, FAST_MONITORING } from "../support/index.js"

let store: Store | undefined
let fixtures: HttpFixture[] = []
let dir: string | undefined

afterEach(async () => {
  await store?.stop()
  await Promise.all(fixtures.map((f) => f.stop()))
  fixtures = []
  store = undefined
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const write = (file: string, doc: unknown) => writeFileSync(file, `${JSON.stringify(doc, null, 2)}\n`)

const healthy = (s: Store, scope = STORE_SCOPE, name: string) =>
  awaitSnapshot(s.serviceActor(scope, name)!, (snap) => statusOf(snap) === "healthy", { timeoutMs: 10_000 })

/** A store on a services file holding one service, `one` (healthy), watching the file; each applied edit in `summaries`. */
const watchedStore = async () => {
  const a = await startHttpFixture()
  fixtures = [a]
  dir = mkdtempSync(join(tmpdir(), "mcp-store-reload-"))
  const file = join(dir, "mcp.json")
  write(file, { mcpServers: { one: { url: a.url } } })
  const running = await createStore({ mcpConfigFile: file, monitoring: FAST_MONITORING })
  store = running
  expect((await healthy(running, STORE_SCOPE, "one")).end).toBe("reached")
  const summaries: Array<{ added: string[]; updated: string[]; removed: string[] }> = []
  running.watchFile((s) => summaries.push(s))
  return { a, file, summaries, running }
}

describe("--reload: hand edits of the services file", () => {
  it("adds, updates, removes and disables services, reconnecting only the changed ones", async () => {
    const [a, b, c] = await Promise.all([startHttpFixture(), startHttpFixture(), startHttpFixture()])
    fixtures = [a!, b!, c!]
    dir = mkdtempSync(join(tmpdir(), "mcp-store-reload-"))
    const file = join(dir, "mcp.json")
    write(file, { mcpServers: { keep: { url: a!.url }, change: { url: a!.url }, drop: { url: a!.url }, pause: { url: a!.url } } })
    store = await createStore({ mcpConfigFile: file, monitoring: FAST_MONITORING })
    for (const name of ["keep", "change", "drop", "pause"]) expect((await healthy(store, STORE_SCOPE, name)).end).toBe("reached")
    const keepActor = store.serviceActor(STORE_SCOPE, "keep")!
    const keepConnection = keepActor.getSnapshot().context.connection
    const keepTransitions = keepActor.getSnapshot().context.transitions.length

    const summaries: Array<{ added: string[]; updated: string[]; removed: string[] }> = []
    store.watchFile((summary) => summaries.push(summary))
    write(file, {
      mcpServers: {
        keep: { url: a!.url },
        change: { url: b!.url },
        pause: { url: a!.url, disabled: true },
        fresh: { url: c!.url }
      },
      agents: { a1: { mcpServers: { helper: { url: c!.url } } } }
    })

    expect(await eventually(() => summaries.some((s) => s.added.includes("fresh")), 5_000)).toBe(true)
    const summary = summaries.find((s) => s.added.includes("fresh"))!
    expect(summary.added.sort()).toEqual(["a1/helper", "fresh"])
    expect(summary.updated.sort()).toEqual(["change", "pause"])
    expect(summary.removed).toEqual(["drop"])

    // The unchanged service kept its actor and its connection: no reconnection.
    expect(store.serviceActor(STORE_SCOPE, "keep")).toBe(keepActor)
    expect(keepActor.getSnapshot().context.connection).toBe(keepConnection)
    expect(keepActor.getSnapshot().context.transitions.length).toBe(keepTransitions)

    expect((await healthy(store, STORE_SCOPE, "change")).end).toBe("reached")
    expect(store.serviceActor(STORE_SCOPE, "change")!.getSnapshot().context.definition.url).toBe(b!.url)
    expect(store.serviceActor(STORE_SCOPE, "drop")).toBeUndefined()
    const paused = await awaitSnapshot(store.serviceActor(STORE_SCOPE, "pause")!, (s) => statusOf(s) === "disconnected", {
      timeoutMs: 5_000
    })
    expect(paused.end).toBe("reached")
    expect((await healthy(store, STORE_SCOPE, "fresh")).end).toBe("reached")
    expect((await healthy(store, agentScope("a1"), "helper")).end).toBe("reached")

    // Enabling it again in the file reconnects it.
    write(file, {
      mcpServers: { keep: { url: a!.url }, change: { url: b!.url }, pause: { url: a!.url }, fresh: { url: c!.url } },
      agents: { a1: { mcpServers: { helper: { url: c!.url } } } }
    })
    expect((await healthy(store, STORE_SCOPE, "pause")).end).toBe("reached")
  })

  it("applies the definitions as they are when its turn comes: a command's change written after the edit was read is kept", async () => {
    const { a, file, summaries, running } = await watchedStore()
    // A command holds the lock: a hand edit is read and announced meanwhile, then the command writes its own change.
    await running.host.serialize(async () => {
      write(file, { mcpServers: { one: { url: a.url }, edited: { url: a.url } } })
      expect(await eventually(() => Object.hasOwn(running.file.read().store, "edited"), 5_000, 10)).toBe(true)
      await running.file.update((draft) => draft.setService(STORE_SCOPE, "commanded", { url: a.url } as never))
    })
    expect(await eventually(() => summaries.length > 0, 5_000, 10)).toBe(true)
    expect(running.serviceActor(STORE_SCOPE, "edited")).toBeDefined()
    expect(running.serviceActor(STORE_SCOPE, "commanded"), "the command's service, in the file, runs").toBeDefined()
    expect(summaries.flatMap((s) => s.removed)).toEqual([])
  })

  it("ignores a file that is not valid JSON while it is being edited, then applies the finished edit", async () => {
    const { a, file, summaries, running } = await watchedStore()
    // A second watcher of the same file reports the broken edit once it has been read and skipped.
    const skipped: Error[] = []
    const unwatch = running.file.watch(
      () => undefined,
      (e) => skipped.push(e)
    )
    writeFileSync(file, '{"mcpServers": {"one": ')
    expect(await eventually(() => skipped.length > 0, 5_000)).toBe(true)
    unwatch()
    expect(running.serviceActor(STORE_SCOPE, "one")).toBeDefined()
    expect(summaries.every((s) => s.removed.length === 0)).toBe(true)
    write(file, { mcpServers: { one: { url: a.url }, two: { url: a.url } } })
    expect(await eventually(() => running.serviceActor(STORE_SCOPE, "two") !== undefined, 5_000)).toBe(true)
    expect(running.serviceActor(STORE_SCOPE, "one")).toBeDefined()
  })
})
