// The store's own caps, over HTTP with small values: services one request may define
// (max_services_per_request), services in the store and every agent (max_services: add_service,
// loading the services file, --reload), and concurrent waits (max_waiters: wait_service,
// add_service ?wait, calls waiting for an initializing service). A refused request answers 429
// TOO_MANY with the cap in `details`, and changes nothing: no service added, the file byte-for-byte
// the same. The count of waits goes back to 0 however a wait ends.
import { existsSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished, vi } from "vitest"
import { captureLogs } from "../../src/logging/log.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { gatedStdioFixture } from "../fixtures/paths.js"
import { eventually, freshDir, localService, startTestServer, type TestServer } from "../support/index.js"

describe("the store's caps", { timeout: 30_000 }, () => {
  let http: HttpFixture
  let server: TestServer | undefined

  beforeAll(async () => {
    http = await startHttpFixture()
  }, 15_000)
  afterAll(async () => {
    await http?.stop()
  }, 15_000)
  afterEach(async () => {
    vi.restoreAllMocks()
    await server?.cleanup()
    server = undefined
  }, 15_000)

  const remote = (name: string) => ({ name, url: http.url })
  const allNames = async (s: TestServer) =>
    ((await s.get("/for_store/list_services?scope=all")).body.services as Array<{ name: string; scope: string }>)
      .map((x) => (x.scope === "store" ? x.name : `${x.scope}/${x.name}`))
      .sort()
  const expectTooMany = (reply: { status: number; text: string; body: any; headers: Headers }, limit: string, max: number) => {
    expect(reply.status, reply.text).toBe(429)
    expect(reply.body).toMatchObject({ success: false, error: { code: "TOO_MANY", details: { limit, max } } })
    expect(reply.body.error.details.retry_after_seconds).toBeGreaterThan(0)
    // The header the HTTP layer sets from the body's details.
    expect(reply.headers.get("retry-after")).toBe(String(Math.ceil(reply.body.error.details.retry_after_seconds)))
    expect(reply.body.message).toContain(limit)
  }

  describe("max_services_per_request", () => {
    it("a request defining more services than the cap is refused whole; at the cap it is accepted", async () => {
      server = await startTestServer({ services: { mcpServers: {} }, options: { max_services_per_request: 2 } })
      const before = server.readFileText()
      const three = await server.post("/for_store/add_service", [remote("a"), remote("b"), remote("c")])
      expectTooMany(three, "max_services_per_request", 2)
      const asObject = await server.post("/for_agent/ag/add_service", { mcpServers: { a: { url: http.url }, b: { url: http.url }, c: { url: http.url } } })
      expectTooMany(asObject, "max_services_per_request", 2)
      expect(server.readFileText()).toBe(before)
      expect(await allNames(server)).toEqual([])
      const two = await server.post("/for_store/add_service", [remote("a"), remote("b")])
      expect(two.status, two.text).toBe(200)
      expect(await allNames(server)).toEqual(["a", "b"])
    })
  })

  describe("max_services", () => {
    it("counts the store and every agent; a refused add changes nothing; unchanged and updated services are not new", async () => {
      server = await startTestServer({ services: { mcpServers: {} }, options: { max_services: 3 } })
      expect((await server.post("/for_store/add_service", [remote("a"), remote("b")])).status).toBe(200)
      expect((await server.post("/for_agent/ag/add_service", remote("c"))).status).toBe(200)
      const before = server.readFileText()

      expectTooMany(await server.post("/for_store/add_service", remote("d")), "max_services", 3)
      expectTooMany(await server.post("/for_agent/other/add_service", remote("d")), "max_services", 3)
      // One new among known ones: the whole request is refused, the known one not updated either.
      expectTooMany(await server.post("/for_store/add_service", [{ ...remote("a"), headers: { x: "1" } }, remote("d")]), "max_services", 3)
      expect(server.readFileText()).toBe(before)
      expect(await allNames(server)).toEqual(["a", "ag/c", "b"])
      expect((await server.get("/for_agent/other/list_services")).body.total_services).toBe(0)

      // Re-adding an identical service and changing one add nothing: accepted at the cap.
      const same = await server.post("/for_store/add_service", remote("a"))
      expect(same.body).toMatchObject({ success: true, unchanged: ["a"] })
      const changed = await server.post("/for_store/add_service", { ...remote("b"), headers: { x: "1" } })
      expect(changed.body).toMatchObject({ success: true, updated: ["b"] })

      // A deleted service makes room.
      expect((await server.del("/for_agent/ag/delete_service/c")).status).toBe(200)
      const d = await server.post("/for_store/add_service", remote("d"))
      expect(d.status, d.text).toBe(200)
      expect(await allNames(server)).toEqual(["a", "b", "d"])
    })

    it("loading the services file: services past the cap are not started, with a warning; the file is kept as it is", async () => {
      const captured = captureLogs({ level: "warning" })
      onTestFinished(() => captured.restore())
      const doc = {
        mcpServers: { a: { url: http.url }, b: { url: http.url } },
        agents: { ag: { mcpServers: { c: { url: http.url }, d: { url: http.url } } } }
      }
      server = await startTestServer({ services: doc, options: { max_services: 3 } })
      expect(await allNames(server)).toEqual(["a", "ag/c", "b"])
      const warning = captured.lines.find((m) => m.includes("max_services"))
      expect(warning).toBeDefined()
      expect(warning).toContain("ag/d")
      expect(server.readFile()).toEqual(doc)
      expectTooMany(await server.post("/for_store/add_service", remote("e")), "max_services", 3)
    })

    it("--reload: an edit that adds past the cap starts only what fits; removed services make room first", async () => {
      const captured = captureLogs({ level: "warning" })
      onTestFinished(() => captured.restore())
      server = await startTestServer({ services: { mcpServers: { a: { url: http.url }, b: { url: http.url } } }, options: { max_services: 2 } })
      const summaries: Array<{ added: string[]; removed: string[] }> = []
      server.running.store.watchFile((s) => summaries.push(s))
      // b removed and c added in one edit: c fits because b goes first; d does not.
      writeFileSync(server.file, JSON.stringify({ mcpServers: { a: { url: http.url }, c: { url: http.url }, d: { url: http.url } } }))
      expect(await eventually(() => summaries.length > 0, 5_000)).toBe(true)
      expect(summaries[0]).toMatchObject({ added: ["c"], removed: ["b"] })
      expect(await allNames(server)).toEqual(["a", "c"])
      expect(captured.lines.some((m) => m.includes("max_services") && m.includes(": d"))).toBe(true)
    })
  })

  describe("max_waiters", () => {
    it("wait_service, add_service ?wait and a call waiting for an initializing service are refused at the cap; the count goes back to 0 on every path", async () => {
      const dir = freshDir()
      const gate = join(dir, "gate")
      const launch = gatedStdioFixture(gate)
      server = await startTestServer({
        dir,
        services: { mcpServers: { ready: { url: http.url }, slow: { command: launch.command, args: [...launch.args] } } },
        options: { max_waiters: 1 }
      })
      const s = server
      const store = s.running.store
      expect((await s.post("/for_store/wait_service", { client_id_or_service_name: "ready", timeout: 10 })).body.data.result).toBe(true)
      expect(store.waiters.active).toBe(0)

      // Timed out: the place is given back.
      const timedOut = await s.post("/for_store/wait_service", { client_id_or_service_name: "slow", timeout: 0.2 })
      expect(timedOut.body.data).toMatchObject({ result: false, final_status: "initializing" })
      expect(store.waiters.active).toBe(0)

      // One wait holds the only place.
      const holder = s.post("/for_store/wait_service", { client_id_or_service_name: "slow", status: "healthy", timeout: 25 })
      expect(await eventually(() => store.waiters.active === 1, 5_000)).toBe(true)
      const before = s.readFileText()
      expectTooMany(await s.post("/for_store/wait_service", { client_id_or_service_name: "slow", timeout: 5 }), "max_waiters", 1)
      expectTooMany(await s.post("/for_store/add_service?wait=5", remote("fresh")), "max_waiters", 1)
      expectTooMany(await s.post("/for_store/call_tool", { tool_name: "slow__echo", args: { text: "x" }, timeout: 5 }), "max_waiters", 1)
      expect(s.readFileText()).toBe(before)
      expect(await allNames(s)).toEqual(["ready", "slow"])
      // A wait whose status already holds takes no place; nor does add_service without ?wait.
      expect((await s.post("/for_store/wait_service", { client_id_or_service_name: "ready", timeout: 5 })).body.data.result).toBe(true)
      expect((await s.post("/for_store/add_service", remote("fresh"))).status).toBe(200)
      expect(store.waiters.active).toBe(1)

      // Reached.
      expect(existsSync(gate)).toBe(false)
      writeFileSync(gate, "")
      expect((await holder).body.data).toMatchObject({ result: true, final_status: "healthy" })
      expect(store.waiters.active).toBe(0)
      const withWait = await s.post("/for_store/add_service?wait=10", remote("later"))
      expect(withWait.body.services[0]).toMatchObject({ name: "later", status: "healthy" })
      expect(store.waiters.active).toBe(0)
    })

    it("a wait ended by its client going away, and one ended by the service's deletion, give their place back", async () => {
      const dir = freshDir()
      const gate = join(dir, "gate")
      const launch = gatedStdioFixture(gate)
      server = await startTestServer({ dir, services: { mcpServers: {} }, options: { max_waiters: 1 } })
      const s = server
      const store = s.running.store
      expect((await s.post("/for_store/add_service", localService("slow", launch))).status).toBe(200)

      // Aborted: the client closes the request.
      const abort = new AbortController()
      const aborted = fetch(`${s.url}/for_store/wait_service`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ client_id_or_service_name: "slow", timeout: 25 }),
        signal: abort.signal
      }).catch((e: unknown) => e)
      expect(await eventually(() => store.waiters.active === 1, 5_000)).toBe(true)
      abort.abort()
      await aborted
      expect(await eventually(() => store.waiters.active === 0, 5_000)).toBe(true)

      // A call waiting for the service holds the place too; deleting the service ends its wait.
      const call = s.post("/for_store/call_tool", { tool_name: "slow__echo", args: { text: "x" }, timeout: 25 })
      expect(await eventually(() => store.waiters.active === 1, 5_000)).toBe(true)
      expectTooMany(await s.post("/for_store/wait_service", { client_id_or_service_name: "slow", timeout: 5 }), "max_waiters", 1)
      expect((await s.del("/for_store/delete_service/slow")).status).toBe(200)
      const ended = await call
      expect(ended.status, ended.text).not.toBe(200)
      expect(store.waiters.active).toBe(0)
    })
  })
})
