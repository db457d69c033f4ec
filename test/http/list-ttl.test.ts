// An upstream of the 2026-07-28 revision says how long its lists stay fresh (`ttlMs`): the store
// lists again when that time has passed, so a tool the server added without announcing it (no
// list_changed) reaches the store's list_tools after the ttl, not after tools_update_hours. The
// server is the SDK v2 era fixture (test/fixtures/era-http.ts) with its cache hints set to the
// store's floor (MIN_LIST_TTL_MS): the test waits that long, once.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MIN_LIST_TTL_MS } from "../../src/machines/service.js"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { eventually, useTestServers } from "../support/index.js"

const servers = useTestServers()

describe("a modern upstream's ttlMs bounds how long the store serves its tool list", { timeout: 30_000 }, () => {
  let http: EraHttpFixture
  beforeAll(async () => {
    const hint = { ttlMs: MIN_LIST_TTL_MS, cacheScope: "public" as const }
    http = await startEraHttpFixture({ cacheHints: { "tools/list": hint, "resources/list": hint, "resources/templates/list": hint, "prompts/list": hint } })
  })
  afterAll(async () => {
    await http.stop()
  })

  it("a tool added without list_changed appears in list_tools after the ttl; the list is not asked in a loop", async () => {
    // New tools are taken at once: the test adds one upstream on purpose (held by default: test/extras/tool-pins.test.ts).
    const server = await servers.start({ monitoring: { health_check_seconds: 60 }, options: { pin_new_tools: "accept" } })
    const added = await server.post("/for_store/add_service?wait=15", [{ name: "modern", url: http.url }])
    expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy"])
    const actor = server.running.store.forStore().findService("modern")!
    expect(actor.getSnapshot().context.toolsTtlMs).toBe(MIN_LIST_TTL_MS)
    const names = async () => ((await server.get("/for_store/list_tools")).body.tools as Array<{ name: string }>).map((t) => t.name)
    const lists = () => http.requests().filter((r) => r === "POST tools/list").length

    const listedAt = actor.getSnapshot().context.toolsUpdatedAt!
    const before = lists()
    http.addToolSilently("quiet")
    expect(await names()).not.toContain("modern__quiet")
    expect(await eventually(async () => (await names()).includes("modern__quiet"), MIN_LIST_TTL_MS + 10_000, 100)).toBe(true)
    // Listed again once, when the ttl had passed (a ttl at the floor: exactly then), not sooner.
    expect(actor.getSnapshot().context.toolsUpdatedAt! - listedAt).toBeGreaterThanOrEqual(MIN_LIST_TTL_MS - 50)
    expect(lists() - before).toBe(1)
  })
})
