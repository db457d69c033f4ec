// Names that are also keys of Object.prototype ("constructor", "toString", "__proto__",
// "hasOwnProperty", "valueOf"): valid service names (all but "__proto__", which starts with "_")
// and agent ids by the contract's patterns, and lookups of unknown names. They must behave like any
// other name on every route: 404 when unknown (never 500); a service or an agent by that name is
// added, listed, called, waited for, restarted, updated, disconnected, deleted, counted by every
// monitoring figure, recorded, written to the services file and read back from it. A body with a
// "__proto__" key pollutes nothing.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { startTestServer, type Reply, type TestServer } from "../support/index.js"

/** Service names that are keys of Object.prototype. */
const SERVICES = ["constructor", "toString", "hasOwnProperty", "valueOf"]
/** Agent ids that are keys of Object.prototype ("__proto__" is a valid agent id, not a valid service name). */
const AGENTS = ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf"]
/** The fixture's tools. */
const TOOL_COUNT = 6

const ok = (reply: Reply) => {
  expect(reply.status, reply.text).toBe(200)
  return reply.body
}
/** The own keys of a JSON object as sent (JSON.parse keeps "__proto__" as an own key). */
const keysOf = (text: string, path: ReadonlyArray<string>) => {
  let value: any = JSON.parse(text)
  for (const p of path) value = Object.hasOwn(value, p) ? value[p] : undefined
  return Object.keys(value ?? {}).sort()
}
const json = (s: TestServer, method: string, path: string, body: string) =>
  s.request(method, path, { body, headers: { "content-type": "application/json" } })

describe("Object.prototype keys as names", { timeout: 10_000 }, () => {
  let http: HttpFixture

  beforeAll(async () => {
    http = await startHttpFixture()
  }, 15_000)
  afterAll(async () => {
    await http?.stop()
  }, 15_000)

  // One store for the lookups of unknown names and the single additions: each addition removes what it
  // added (afterEach), so every test meets a store with no service, as a fresh one would be.
  describe("one at a time", { timeout: 10_000 }, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer({ services: { mcpServers: {} } })
    }, 15_000)
    afterAll(async () => {
      await server?.cleanup()
    }, 15_000)

    describe("lookups of unknown names", () => {
      it.each(["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf"])("store: %s is unknown (404, not 500)", async (name) => {
        const wait = await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 0.2 })
        expect(wait.status, wait.text).toBe(404)
        expect(wait.body.error.code).toBe("SERVICE_NOT_FOUND")
        const del = await server.post("/for_store/delete_service_two_step", { service_name: name })
        expect(del.status, del.text).toBe(404)
        const byService = await server.post("/for_store/call_tool", { tool_name: "echo", service_name: name })
        expect(byService.status, byService.text).toBe(404)
        const callable = await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: "x" } })
        expect(callable.status, callable.text).toBe(404)
        expect(callable.body.error.code).toBe("TOOL_NOT_FOUND")
      })

      it.each(["constructor", "__proto__", "hasOwnProperty"])("agent %s without services: 404 for its lookups, not 500", async (id) => {
        const wait = await server.post(`/for_agent/${id}/wait_service`, { client_id_or_service_name: "x", timeout: 0.2 })
        expect(wait.status, wait.text).toBe(404)
        expect(wait.body.error.code).toBe("SERVICE_NOT_FOUND")
        const call = await server.post(`/for_agent/${id}/call_tool`, { tool_name: "echo" })
        expect(call.status, call.text).toBe(404)
        expect(call.body.error.code).toBe("TOOL_NOT_FOUND")
      })
    })

    describe("adding them", () => {
      /** What the test added, removed after it. */
      let added: { store?: string; agent?: string } = {}
      afterEach(async () => {
        if (added.store !== undefined) ok(await server.del(`/for_store/delete_service/${added.store}`))
        if (added.agent !== undefined) ok(await server.post(`/for_agent/${added.agent}/reset_config`, {}))
        added = {}
        expect((await server.get("/for_store/list_services?scope=all")).body.total_services).toBe(0)
      }, 15_000)

      it.each(["constructor", "toString"])("a store service named %s is added, healthy and callable", { timeout: 15_000 }, async (name) => {
        added = { store: name }
        const reply = await server.post("/for_store/add_service?wait=10", { name, url: http.url })
        expect(reply.status, reply.text).toBe(200)
        expect(reply.body.added).toEqual([name])
        expect(reply.body.services[0]).toMatchObject({ name, status: "healthy" })
        const call = await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: "proto" } })
        expect(call.body).toMatchObject({ success: true, result: "proto" })
      })

      it.each(["constructor", "__proto__"])("an agent named %s gets its own service", { timeout: 15_000 }, async (id) => {
        added = { agent: id }
        const reply = await server.post(`/for_agent/${id}/add_service?wait=10`, { name: "svc", url: http.url })
        expect(reply.status, reply.text).toBe(200)
        expect(reply.body.services[0]).toMatchObject({ name: "svc", status: "healthy", scope: id })
        const call = await server.post(`/for_agent/${id}/call_tool`, { tool_name: "svc__echo", args: { text: "agent proto" } })
        expect(call.body).toMatchObject({ success: true, result: "agent proto" })
        // And it stays out of the store's space.
        expect((await server.get("/for_store/list_services")).body.total_services).toBe(0)
      })
    })
  })

  describe("every route", { timeout: 60_000 }, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer({ services: { mcpServers: {} } })
    }, 15_000)
    afterAll(async () => {
      await server?.cleanup()
    }, 15_000)

    it("store services named after Object.prototype keys: registered, listed, called, waited for, restarted, updated, disconnected", async () => {
      const added = ok(await server.post("/for_store/add_service?wait=10", SERVICES.map((name) => ({ name, url: http.url }))))
      expect(added.added).toEqual(SERVICES)
      expect(added.services.map((x: { status: string }) => x.status)).toEqual(SERVICES.map(() => "healthy"))

      const list = ok(await server.get("/for_store/list_services"))
      expect(list.services.map((x: { name: string }) => x.name).sort()).toEqual([...SERVICES].sort())
      expect(list.total_tools).toBe(SERVICES.length * TOOL_COUNT)
      const tools = await server.get("/for_store/list_tools")
      expect(ok(tools).total_tools).toBe(SERVICES.length * TOOL_COUNT)
      expect(tools.body.services_count).toBe(SERVICES.length)
      expect(keysOf(tools.text, ["tools_by_service"])).toEqual([...SERVICES].sort())
      for (const name of SERVICES) expect(tools.body.tools_by_service[name]).toBe(TOOL_COUNT)
      const stats = await server.get("/for_store/get_stats")
      expect(ok(stats).total_services).toBe(SERVICES.length)
      expect(keysOf(stats.text, ["tools_by_service"])).toEqual([...SERVICES].sort())
      for (const name of SERVICES) expect(stats.body.tools_by_service[name]).toBe(TOOL_COUNT)
      expect(ok(await server.get("/for_store/health")).status).toBe("healthy")
      expect(ok(await server.get("/for_store/check_services")).healthy_count).toBe(SERVICES.length)

      for (const name of SERVICES) {
        expect(ok(await server.get(`/for_store/list_tools?service_name=${name}`)).tools_by_service).toEqual({ [name]: TOOL_COUNT })
        const info = ok(await server.get(`/for_store/get_service_info?name=${name}`))
        expect(info.service).toMatchObject({ name, status: "healthy" })
        expect(info.tools).toHaveLength(TOOL_COUNT)
        const byClientId = ok(await server.get(`/for_store/get_service_info?name=${info.service.client_id}`))
        expect(byClientId.service.name).toBe(name)
        expect(ok(await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: name } }))).toMatchObject({ result: name, service_name: name })
        expect(ok(await server.post("/for_store/use_tool", { tool_name: "fail", service_name: name }))).toMatchObject({ is_error: true, service_name: name })
        expect(ok(await server.get(`/for_store/service_status/${name}`))).toMatchObject({ name, status: "healthy" })
        expect(ok(await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 5 })).data.result).toBe(true)
        expect(ok(await server.post("/for_store/refresh_tools", { service_name: name })).results[0]).toMatchObject({ service_name: name, tool_count: TOOL_COUNT })

        expect(ok(await server.post("/for_store/restart_service", { service_name: name })).service_name).toBe(name)
        expect(ok(await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 10 })).data.result).toBe(true)
        const updated = ok(await json(server, "PUT", `/for_store/update_service/${name}`, JSON.stringify({ url: http.url, headers: { "x-name": name } })))
        expect(updated.service.name).toBe(name)
        expect(ok(await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 10 })).data.result).toBe(true)
        expect(ok(await server.post("/for_store/disconnect_service", { service_name: name }))).toMatchObject({ service_name: name, status: "disconnected" })
        expect(server.readFile().mcpServers).toMatchObject({ [name]: { disabled: true } })
        ok(await server.post("/for_store/restart_service", { service_name: name }))
        expect(ok(await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 10 })).data.result).toBe(true)
      }
      expect(ok(await server.get("/for_store/health")).status).toBe("healthy")

      // Records and their summaries, per service name.
      const records = await server.get("/for_store/tool_records?limit=100")
      expect(ok(records).total).toBe(SERVICES.length * 2)
      expect(keysOf(records.text, ["summary", "by_service"])).toEqual([...SERVICES].sort())
      for (const name of SERVICES) {
        expect(records.body.summary.by_service[name]).toMatchObject({ count: 2, errors: 1 })
        expect(records.body.summary.by_tool[`${name}__echo`]).toMatchObject({ count: 1, errors: 0 })
        expect(ok(await server.get(`/for_store/tool_records?service_name=${name}`)).total).toBe(2)
      }

      // The services file and show_mcpconfig hold each name as an own key.
      expect(keysOf(server.readFileText(), ["mcpServers"])).toEqual([...SERVICES].sort())
      const shown = await server.get("/for_store/show_mcpconfig")
      expect(keysOf(shown.text, ["config", "mcpServers"])).toEqual([...SERVICES].sort())
    })

    it("agents named after Object.prototype keys (\"__proto__\" too): every agent route", async () => {
      for (const id of AGENTS) {
        const at = `/for_agent/${id}`
        const added = ok(await server.post(`${at}/add_service?wait=10`, [{ name: "constructor", url: http.url }, { name: "valueOf", url: http.url }]))
        expect(added.services.map((x: { scope: string; status: string }) => [x.scope, x.status])).toEqual([[id, "healthy"], [id, "healthy"]])
        expect(ok(await server.get(`${at}/list_services`)).total_services).toBe(2)
        const tools = await server.get(`${at}/list_tools`)
        expect(keysOf(tools.text, ["tools_by_service"])).toEqual(["constructor", "valueOf"])
        expect(ok(await server.get(`${at}/get_service_info?name=constructor`)).service.scope).toBe(id)
        expect(ok(await server.post(`${at}/call_tool`, { tool_name: "constructor__echo", args: { text: id } }))).toMatchObject({ result: id })
        expect(ok(await server.post(`${at}/use_tool`, { tool_name: "valueOf__echo", args: { text: id } }))).toMatchObject({ result: id })
        expect(ok(await server.post(`${at}/wait_service`, { client_id_or_service_name: "valueOf", timeout: 5 })).data).toMatchObject({ result: true, agent_id: id })
        expect(ok(await server.get(`${at}/check_services`)).healthy_count).toBe(2)
        expect(ok(await server.get(`${at}/health`))).toMatchObject({ status: "healthy", agent_id: id })
        const stats = await server.get(`${at}/get_stats`)
        expect(ok(stats)).toMatchObject({ agent_id: id, total_services: 2, tool_calls: { total: 2 } })
        expect(keysOf(stats.text, ["tools_by_service"])).toEqual(["constructor", "valueOf"])
        const records = await server.get(`${at}/tool_records`)
        expect(ok(records).total).toBe(2)
        expect(keysOf(records.text, ["summary", "by_service"])).toEqual(["constructor", "valueOf"])
        const shown = await server.get(`${at}/show_mcpconfig`)
        expect(keysOf(shown.text, ["config", "mcpServers"])).toEqual(["constructor", "valueOf"])
      }
      // The services file holds each agent under its own key, "__proto__" included.
      expect(keysOf(server.readFileText(), ["agents"])).toEqual([...AGENTS].sort())
      for (const id of AGENTS) expect(keysOf(server.readFileText(), ["agents", id, "mcpServers"])).toEqual(["constructor", "valueOf"])
      const agents = ok(await server.get("/for_store/list_all_agents"))
      expect(agents.agents.map((a: { agent_id: string }) => a.agent_id).sort()).toEqual([...AGENTS].sort())
      for (const a of agents.agents) expect(a).toMatchObject({ service_count: 2, tool_count: 2 * TOOL_COUNT, status_summary: { healthy: 2 } })
      const all = ok(await server.get("/for_store/list_services?scope=all"))
      expect(all.total_services).toBe(SERVICES.length + AGENTS.length * 2)
    })

    it("every monitoring route counts them; nothing is written onto Object or Object.prototype", async () => {
      const scopes = ["store", ...AGENTS].sort()
      const summary = ok(await server.get("/monitoring/agents_summary"))
      expect(summary.agents.map((a: { agent_id: string }) => a.agent_id).sort()).toEqual([...AGENTS].sort())
      for (const a of summary.agents) expect(a).toMatchObject({ service_count: 2, healthy_services: 2, total_tool_executions: 2 })
      ok(await server.get("/monitoring/config"))
      const distribution = await server.get("/monitoring/services_status_distribution")
      expect(ok(distribution).total_services).toBe(SERVICES.length + AGENTS.length * 2)
      expect(keysOf(distribution.text, ["by_scope"])).toEqual(scopes)
      for (const id of AGENTS) expect(keysOf(distribution.text, ["by_scope", id])).toContain("healthy")
      expect(JSON.parse(distribution.text).by_scope["__proto__"].healthy).toBe(2)

      const usage = ok(await server.get("/monitoring/tools_usage_stats?limit=100"))
      for (const name of SERVICES) expect(usage.tools.some((t: { service_name: string }) => t.service_name === name)).toBe(true)
      ok(await server.get("/monitoring/system_performance"))
      const times = ok(await server.get("/monitoring/services_response_time"))
      for (const id of AGENTS) expect(times.services.some((t: { scope: string }) => t.scope === id)).toBe(true)
      const errors = await server.get("/monitoring/error_rate_stats")
      expect(keysOf(errors.text, ["by_service"])).toEqual([...SERVICES].sort())
      for (const name of SERVICES.filter((n) => n !== "constructor" && n !== "valueOf")) {
        expect(errors.body.by_service[name]).toEqual({ calls: 2, errors: 1, error_rate: 0.5 })
      }
      // The agents' calls count under their services' names too.
      expect(errors.body.by_service.constructor).toEqual({ calls: 2 + AGENTS.length, errors: 1, error_rate: 0.14 })
      expect(ok(await server.get("/monitoring/error_rate_stats?agent_id=__proto__")).by_service).toEqual({
        constructor: { calls: 1, errors: 0, error_rate: 0 },
        valueOf: { calls: 1, errors: 0, error_rate: 0 }
      })
      ok(await server.get("/monitoring/historical_stats"))
      for (const id of AGENTS) {
        const history = ok(await server.get(`/monitoring/service_health_history?service_name=constructor&agent_id=${id}`))
        expect(history).toMatchObject({ service_name: "constructor", scope: id })
        expect(history.transitions.length).toBeGreaterThan(0)
      }
      for (const name of SERVICES) {
        expect(ok(await server.get(`/monitoring/service_health_history?service_name=${name}`)).transitions.length).toBeGreaterThan(0)
      }
      expect(ok(await server.get("/monitoring/tool_call_history?limit=1000")).calls).toHaveLength(SERVICES.length * 2 + AGENTS.length * 2)
      expect(ok(await server.get("/monitoring/realtime_status")).services.healthy).toBe(SERVICES.length + AGENTS.length * 2)
      ok(await server.get("/monitoring/active_connections"))
      ok(await server.get("/monitoring/resource_usage"))
      ok(await server.get("/monitoring/alerts"))
      const metrics = await server.get("/metrics")
      expect(metrics.status).toBe(200)
      for (const id of AGENTS) expect(metrics.text).toContain(`mcpstore_services{status="healthy",scope="${id}"} 2`)
      for (const key of ["calls", "errors", "error_rate", "count", "healthy"]) {
        expect(Object.hasOwn(Object, key), key).toBe(false)
        expect(Object.hasOwn(Object.prototype, key), key).toBe(false)
        expect(Object.hasOwn(Function.prototype, key), key).toBe(false)
      }
    })

    it("the services file round trip: a restart on the same file brings every name back, then each is deleted", async () => {
      const dir = server.dir
      await server.close()
      server = await startTestServer({ dir })
      for (const name of SERVICES) {
        expect(ok(await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 10 })).data.result).toBe(true)
      }
      for (const id of AGENTS) {
        for (const name of ["constructor", "valueOf"]) {
          expect(ok(await server.post(`/for_agent/${id}/wait_service`, { client_id_or_service_name: name, timeout: 10 })).data.result).toBe(true)
        }
      }
      expect(ok(await server.get("/for_store/list_services?scope=all")).total_services).toBe(SERVICES.length + AGENTS.length * 2)
      // The records are read back, per service name and per agent.
      expect(ok(await server.get("/for_store/tool_records")).total).toBe(SERVICES.length * 2)
      expect(ok(await server.get("/for_agent/__proto__/tool_records")).total).toBe(2)

      const [first, second, ...rest] = SERVICES
      expect(ok(await server.del(`/for_store/delete_service/${first}`)).service_name).toBe(first)
      expect(ok(await server.post("/for_store/delete_service_two_step", { service_name: second })).overall_success).toBe(true)
      for (const name of rest) ok(await server.del(`/for_store/delete_service/${name}`))
      expect(ok(await server.get("/for_store/list_services")).total_services).toBe(0)
      expect(keysOf(server.readFileText(), ["mcpServers"])).toEqual([])
      for (const id of AGENTS) {
        expect(ok(await server.del(`/for_agent/${id}/delete_service/constructor`)).service_name).toBe("constructor")
        expect(ok(await server.post(`/for_agent/${id}/reset_config`, {})).removed).toBe(1)
        expect(ok(await server.get(`/for_agent/${id}/list_services`)).total_services).toBe(0)
      }
      expect(keysOf(server.readFileText(), ["agents"])).toEqual([])
      expect(ok(await server.get("/for_store/list_all_agents")).total_agents).toBe(0)
    })

    it("bodies with a \"__proto__\" key: refused or kept as a plain key, never polluting a prototype", async () => {
      const before = server.readFileText()
      const named = await json(server, "POST", "/for_store/add_service", `{"mcpServers": {"__proto__": {"url": "${http.url}"}}}`)
      expect(named.status, named.text).toBe(400)
      const inside = await json(server, "POST", "/for_store/add_service", `{"name": "p", "url": "${http.url}", "__proto__": {"command": "touch", "args": ["/tmp/polluted"]}}`)
      expect(inside.status, inside.text).toBe(400)
      const env = await json(server, "POST", "/for_store/add_service", `{"name": "p", "command": "true", "env": {"__proto__": {"PATH": "/x"}}}`)
      expect(env.status, env.text).toBe(400)
      const update = await json(server, "POST", "/for_store/add_service", `{"name": "p", "url": "${http.url}"}`)
      ok(update)
      const replaced = await json(server, "PUT", "/for_store/update_service/p", `{"url": "${http.url}", "headers": {"__proto__": {"x": "y"}}}`)
      expect(replaced.status, replaced.text).toBe(400)
      const agentBody = await json(server, "POST", "/for_agent/__proto__/add_service", `{"mcpServers": {"__proto__": {"url": "${http.url}"}}}`)
      expect(agentBody.status, agentBody.text).toBe(400)
      expect(keysOf(server.readFileText(), ["mcpServers"])).toEqual(["p"])
      expect(server.readFileText()).not.toBe(before)
      // Tool arguments are the upstream's business: a "__proto__" key there is no request error.
      ok(await server.post("/for_store/wait_service", { client_id_or_service_name: "p", timeout: 10 }))
      const args = await json(server, "POST", "/for_store/call_tool", '{"tool_name": "p__echo", "args": {"text": "t", "__proto__": {"polluted": "yes"}}}')
      expect(args.status, args.text).toBe(200)
      expect(args.body.result).toBe("t")
      for (const key of ["url", "command", "args", "PATH", "x", "polluted"]) {
        expect(({} as Record<string, unknown>)[key], key).toBeUndefined()
      }
      ok(await server.del("/for_store/delete_service/p"))
    })
  })
})
