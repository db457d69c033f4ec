// Keys with roles over real HTTP (src/http/access.ts, src/config/api-keys.ts): keys made by the CLI's
// code path (runKeys), one store, every route of the contract and every extra route asked by an
// admin, agent A's key, agent B's key, a reader, a revoked key, an expired key and no key; then what
// agent A's key sees: its own services, records and figures, never agent B's or the store's.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import { readFileSync, statSync } from "node:fs"
import { KeyRing, readKeys, writeKeys } from "../../src/config/api-keys.js"
import { rm, writeFile } from "node:fs/promises"
import { runKeys } from "../../src/cli/keys-command.js"
import { EXTRA_ROUTES } from "../../src/http/extras.js"
import { addService, authedApi, endpointSpecs, eventually, fillPath, fixtureService, freshDir, startTestServer, type TestServer } from "../support/index.js"

const A = "agent-a"
const B = "agent-b"

/** Runs `mcp-store keys ...` in-process; resolves with its exit code and output. */
const keysCli = async (file: string, ...argv: string[]) => {
  let out = ""
  let err = ""
  const code = await runKeys([...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  return { code, out, err }
}

/** Creates a key with the CLI; the printed key. */
const create = async (file: string, ...argv: string[]): Promise<string> => {
  const r = await keysCli(file, "create", ...argv)
  expect(r.code, r.err).toBe(0)
  return r.out.trim()
}

type Who = "admin" | "agentA" | "agentB" | "reader" | "revoked" | "expired" | "none"
const OPEN = new Set([
  "GET /health",
  "GET /ui",
  "GET /docs",
  "GET /openapi.json",
  "GET /oauth/callback",
  "POST /oauth/callback",
  // The built-in authorization server's open endpoints (each checks its own proof).
  "GET /.well-known/oauth-authorization-server",
  "GET /oauth/jwks",
  "GET /oauth/authorize",
  "POST /oauth/token",
  "POST /oauth/revoke",
  "POST /oauth/register"
])
const NARROWED = /^\/monitoring\/(agents_summary|services_status_distribution|tools_usage_stats|services_response_time|error_rate_stats|historical_stats|service_health_history|tool_call_history|alerts)$/
const READER_REFUSED = /show_mcpconfig$|show_config$|^\/inspect\/|\/(mcp|sse|messages)$/

/** What `who` gets: "through" (past authorization: any answer but 401 and 403), 401 or 403. */
const expected = (who: Who, method: string, path: string): "through" | 401 | 403 => {
  // The OAuth protected resource metadata (RFC 9728) is open too: where a client learns how to get a token.
  if (OPEN.has(`${method} ${path}`) || (method === "GET" && path.startsWith("/.well-known/oauth-protected-resource"))) return "through"
  switch (who) {
    case "admin":
      return "through"
    case "none":
    case "revoked":
    case "expired":
      return 401
    case "reader":
      return method === "GET" && !READER_REFUSED.test(path) ? "through" : 403
    case "agentA":
    case "agentB": {
      const own = who === "agentA" ? A : B
      if (path.startsWith("/for_agent/")) return path.startsWith(`/for_agent/${own}/`) ? "through" : 403
      return method === "GET" && (NARROWED.test(path) || path === "/events") ? "through" : 403
    }
  }
}

describe("keys with roles", () => {
  let server: TestServer
  const keys = {} as Record<Who, string | undefined>
  let keysFile: string

  beforeAll(async () => {
    const dir = freshDir()
    keysFile = join(dir, "mcp-store.keys.json")
    keys.admin = await create(keysFile, "--role", "admin", "--name", "ops")
    keys.agentA = await create(keysFile, "--role", "agent", "--agent", A, "--name", "a")
    keys.agentB = await create(keysFile, "--role", "agent", "--agent", B, "--name", "b")
    keys.reader = await create(keysFile, "--role", "reader", "--name", "dash")
    keys.revoked = await create(keysFile, "--role", "admin", "--name", "old")
    expect((await keysCli(keysFile, "revoke", "old")).code).toBe(0)
    keys.expired = await create(keysFile, "--role", "admin", "--name", "temp", "--expires", "1")
    // Expired yesterday: the file as a day later.
    const doc = await readKeys(keysFile)
    await writeKeys(keysFile, { version: 1, keys: doc.keys.map((k) => (k.name === "temp" ? { ...k, expires: new Date(Date.now() - 86_400_000).toISOString() } : k)) })
    keys.none = undefined
    server = await startTestServer({ dir })
    const admin = authedApi(server.url, keys.admin)
    await Promise.all([addService(admin, `/for_agent/${A}`, fixtureService("svc")), addService(admin, `/for_agent/${B}`, fixtureService("svc"))])
    // One call by each agent, through its own key (the direct call route).
    for (const [who, agent] of [["agentA", A], ["agentB", B]] as const) {
      const reply = await authedApi(server.url, keys[who]!).post(`/for_agent/${agent}/call_tool`, { tool_name: "svc__echo", args: { text: `from ${agent}` } })
      expect(reply.status, reply.text).toBe(200)
    }
  }, 60_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("the keys file holds hashes only, mode 0600; keys list never shows a key", async () => {
    const text = JSON.stringify(await readKeys(keysFile))
    for (const key of Object.values(keys)) if (key !== undefined) expect(text).not.toContain(key)
    expect(statSync(keysFile).mode & 0o777).toBe(0o600)
    const listed = await keysCli(keysFile, "list")
    expect(listed.out).toMatch(/ops\s+admin/)
    expect(listed.out).toMatch(/a\s+agent\s+agent-a/)
    expect(listed.out).toMatch(/revoked/)
    expect(listed.out).toMatch(/expired/)
    for (const key of Object.values(keys)) if (key !== undefined) expect(listed.out).not.toContain(key)
  })

  it("the CLI refuses what makes no sense, with exit code 2", async () => {
    expect((await keysCli(keysFile, "create", "--role", "agent")).code).toBe(2)
    expect((await keysCli(keysFile, "create", "--role", "agent", "--agent", "a b")).code).toBe(2)
    expect((await keysCli(keysFile, "create", "--role", "admin", "--name", "ops")).code).toBe(2)
    expect((await keysCli(keysFile, "create", "--role", "root")).code).toBe(2)
    expect((await keysCli(keysFile, "revoke", "nobody")).code).toBe(2)
  })

  it("every route, for every kind of caller: admin all, agent keys their own agent and narrowed figures, reader reads, the rest 401", async () => {
    const specs = await endpointSpecs()
    const routes = new Map<string, { method: string; path: string }>()
    for (const r of [...specs, ...EXTRA_ROUTES]) routes.set(`${r.method} ${r.path}`, { method: r.method, path: r.path })
    const cases = [...routes.values()].flatMap((route) =>
      (Object.keys(keys) as Who[]).map((who) => ({ who, ...route, url: fillPath(route.path, { agent_id: A, service_name: "no-such-svc", call_id: `call_${"A".repeat(32)}`, approval_id: `apr_${"A".repeat(22)}` }) }))
    )
    const failures: string[] = []
    const check = async ({ who, method, path, url }: (typeof cases)[number]) => {
      const headers: Record<string, string> = keys[who] === undefined ? {} : { authorization: `Bearer ${keys[who]}` }
      // A body that is never a valid request: a caller let through is refused with 400 before any
      // handler changes anything (reset_config, delete_service... stay harmless).
      const hasBody = method === "POST" || method === "PUT"
      if (hasBody) headers["content-type"] = "application/json"
      const controller = new AbortController()
      const res = await fetch(server.url + url, { method, headers, ...(hasBody ? { body: "[]" } : {}), signal: controller.signal })
      // Event streams stay open: the status is all this needs. Other answers are read to their end, so
      // their connection serves the next case.
      if (/event-stream/.test(res.headers.get("content-type") ?? "")) controller.abort()
      else await res.arrayBuffer()
      const want = expected(who, method, url.replace(/^\/for_agent\/agent-a\//, `/for_agent/${A}/`))
      const ok = want === "through" ? res.status !== 401 && res.status !== 403 : res.status === want
      if (!ok) failures.push(`${who} ${method} ${url}: ${res.status}, expected ${want}`)
    }
    // Every case, eight at a time: the connections are reused (keep-alive) instead of some 800 opened
    // at once, one per case.
    const queue = [...cases]
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let next = queue.shift(); next !== undefined; next = queue.shift()) await check(next)
      })
    )
    expect(queue).toEqual([])
    expect(failures).toEqual([])
  }, 60_000)

  it("agent A's key sees only agent A: its services, records and every figure; asking for B or the store is 403", async () => {
    const a = authedApi(server.url, keys.agentA!)
    const services = await a.get(`/for_agent/${A}/list_services`)
    expect(services.status).toBe(200)
    const records = await a.get(`/for_agent/${A}/tool_records?scope=all`)
    expect(records.status).toBe(200)
    expect(records.text).not.toContain(B)
    for (const path of [
      "/monitoring/agents_summary",
      "/monitoring/services_status_distribution",
      "/monitoring/tools_usage_stats",
      "/monitoring/services_response_time",
      "/monitoring/error_rate_stats",
      "/monitoring/tool_call_history",
      "/monitoring/alerts",
      "/monitoring/service_health_history?service_name=svc"
    ]) {
      const reply = await a.get(path)
      expect(reply.status, `${path}: ${reply.text}`).toBe(200)
      expect(reply.text, path).not.toContain(B)
      expect(reply.text, path).not.toContain(`from ${B}`)
      const other = await a.get(`${path}${path.includes("?") ? "&" : "?"}agent_id=${B}`)
      expect(other.status, path).toBe(403)
      expect(other.body.error.code).toBe("FORBIDDEN")
      expect((await a.get(`${path}${path.includes("?") ? "&" : "?"}agent_id=store`)).status, path).toBe(403)
    }
    const history = await a.get("/monitoring/tool_call_history")
    expect(history.body.calls.map((c: { agent_id: string }) => c.agent_id)).toEqual([A])
    const summary = await a.get("/monitoring/agents_summary")
    expect(summary.body.agents.map((x: { agent_id: string }) => x.agent_id)).toEqual([A])
    expect(summary.body.store_services).toBe(0)
    const days = await a.get("/monitoring/historical_stats")
    expect(days.body.days.reduce((n: number, d: { calls: number }) => n + d.calls, 0)).toBe(1)
    // Agent A's key cannot call, change or read agent B's services, even on the direct call route.
    const call = await a.post(`/for_agent/${B}/call_tool`, { tool_name: "svc__echo", args: { text: "x" } })
    expect(call.status).toBe(403)
    expect((await a.del(`/for_agent/${B}/delete_service/svc`)).status).toBe(403)
    expect((await a.post("/for_store/reset_config", { scope: "all" })).status).toBe(403)
    const admin = authedApi(server.url, keys.admin!)
    const left = await admin.get(`/for_agent/${B}/list_services`)
    expect(left.status).toBe(200)
    expect(left.text).toContain('"name":"svc"')
  })

  it("an agent key may not define local (command) services: they run on the store's machine", async () => {
    const reply = await authedApi(server.url, keys.agentA!).post(`/for_agent/${A}/add_service`, fixtureService("local-one"))
    expect(reply.status).toBe(403)
    expect(reply.body.error.code).toBe("FORBIDDEN")
  })

  it("the three figures that ignored agent_id now narrow by it and by service_name, and refuse malformed values with 400", async () => {
    const admin = authedApi(server.url, keys.admin!)
    const dist = await admin.get(`/monitoring/services_status_distribution?agent_id=${A}`)
    expect(Object.keys(dist.body.by_scope)).toEqual([A])
    expect(dist.body.total_services).toBe(1)
    const summary = await admin.get(`/monitoring/agents_summary?agent_id=${B}`)
    expect(summary.body.agents.map((x: { agent_id: string }) => x.agent_id)).toEqual([B])
    const none = await admin.get(`/monitoring/agents_summary?service_name=other`)
    expect(none.body.total_services).toBe(0)
    const days = await admin.get(`/monitoring/historical_stats?agent_id=${B}&service_name=svc`)
    expect(days.body.days.reduce((n: number, d: { calls: number }) => n + d.calls, 0)).toBe(1)
    const all = await admin.get(`/monitoring/historical_stats`)
    expect(all.body.days.reduce((n: number, d: { calls: number }) => n + d.calls, 0)).toBe(2)
    for (const path of ["agents_summary", "services_status_distribution", "historical_stats"]) {
      for (const bad of ["a%20b", "x".repeat(101), "%C3%A9t%C3%A9"]) {
        const reply = await admin.get(`/monitoring/${path}?agent_id=${bad}`)
        expect(reply.status, `${path} ${bad}`).toBe(400)
        expect(reply.body.error.code).toBe("VALIDATION_ERROR")
      }
    }
  })

  it("the running store picks up a new key and a revocation without a restart", async () => {
    const fresh = await create(keysFile, "--role", "agent", "--agent", A, "--name", "late")
    const client = authedApi(server.url, fresh)
    expect(await eventually(async () => (await client.get(`/for_agent/${A}/list_services`)).status === 200, 5_000)).toBe(true)
    expect((await keysCli(keysFile, "revoke", "late")).code).toBe(0)
    expect(await eventually(async () => (await client.get(`/for_agent/${A}/list_services`)).status === 401, 5_000)).toBe(true)
  })
})

describe("MCPSTORE_API_KEY_FILE", () => {
  it("its first line is one more admin key; an empty file is refused", async () => {
    const { KeyRing, readApiKeyFile } = await import("../../src/config/api-keys.js")
    const { writeFileSync } = await import("node:fs")
    const dir = freshDir()
    writeFileSync(join(dir, "admin.key"), "from-a-file\n")
    const ring = new KeyRing(join(dir, "mcp-store.keys.json"), [readApiKeyFile(join(dir, "admin.key"))])
    ring.loadSync()
    expect(ring.check("Bearer from-a-file")).toMatchObject({ ok: true, principal: { role: "admin" } })
    expect(ring.check("Bearer from-a-fil")).toMatchObject({ ok: false, why: "unknown" })
    expect(ring.check(undefined)).toMatchObject({ ok: false, why: "missing" })
    writeFileSync(join(dir, "empty.key"), "\n")
    expect(() => readApiKeyFile(join(dir, "empty.key"))).toThrow(/empty/)
    await ring.close()
  })
})

describe("the keys file edited by hand while the store runs", () => {
  /** A keys file with one admin key, and a ring watching it as a running store's does, with the problems it reports. */
  const watchedRing = async () => {
    const dir = freshDir()
    const file = join(dir, "mcp-store.keys.json")
    const key = await create(file, "--role", "admin", "--name", "ops")
    const problems: string[] = []
    const ring = new KeyRing(file, [], (m) => problems.push(m))
    ring.loadSync()
    ring.watch()
    return { dir, file, key, problems, ring }
  }

  it("a revocation or an expiry that is not a time is refused, and the keys as they were are kept", async () => {
    const { dir, file, key, problems, ring } = await watchedRing()
    const doc = await readKeys(file)
    for (const [field, value] of [["revoked", true], ["revoked", "yes"], ["expires", "31/12/2025"]] as const) {
      problems.length = 0
      await writeFile(file, JSON.stringify({ version: 1, keys: doc.keys.map((k) => ({ ...k, [field]: value })) }))
      expect(await eventually(() => problems.length > 0, 5_000), `${field}: ${String(value)}`).toBe(true)
      expect(problems[0]).toMatch(new RegExp(`keys\\[0\\]\\.${field} must be null or a time .*; the keys as they were are kept`))
      // Still the key it was (the file is not read as "never revoked, never expires" either).
      expect(ring.check(`Bearer ${key}`)).toMatchObject({ ok: true })
    }
    await writeKeys(file, doc)
    await ring.close()
  })

  it("a keys file deleted or emptied does not open the store: a key is still required, the file's are refused, with a line", async () => {
    const { dir, file, key, problems, ring } = await watchedRing()
    expect(ring.required).toBe(true)
    await rm(file)
    expect(await eventually(() => problems.some((p) => p.includes("is gone or holds no key")), 5_000)).toBe(true)
    expect(ring.required).toBe(true)
    expect(ring.check(`Bearer ${key}`)).toMatchObject({ ok: false, why: "unknown" })
    expect(ring.check(undefined)).toMatchObject({ ok: false, why: "missing" })
    // Emptied by hand: the same.
    const again = await create(file, "--role", "admin", "--name", "ops2")
    expect(await eventually(() => ring.check(`Bearer ${again}`).ok, 5_000)).toBe(true)
    await writeKeys(file, { version: 1, keys: [] })
    expect(await eventually(() => !ring.check(`Bearer ${again}`).ok, 5_000)).toBe(true)
    expect(ring.required).toBe(true)
    await ring.close()
    // A store that starts with no key at all is open, as before.
    const open = new KeyRing(join(dir, "none.json"), [])
    open.loadSync()
    expect(open.required).toBe(false)
    await open.close()
  })
})

describe("a key's last use", () => {
  it("is written beside the keys file, never into it: a key the CLI creates or revokes meanwhile is never written over; keys list shows it", async () => {
    const dir = freshDir()
    const file = join(dir, "mcp-store.keys.json")
    const key = await create(file, "--role", "admin", "--name", "ops")
    const ring = new KeyRing(file, [])
    ring.loadSync()
    expect(ring.check(`Bearer ${key}`)).toMatchObject({ ok: true })
    // The CLI creates a key while the store holds a use to write.
    await create(file, "--role", "reader", "--name", "dash")
    const keysText = readFileSync(file, "utf8")
    await ring.close()
    expect(readFileSync(file, "utf8")).toBe(keysText)
    const uses = JSON.parse(readFileSync(join(dir, "mcp-store.keys.uses.json"), "utf8")) as Record<string, string>
    const [id] = Object.keys(uses)
    expect((await readKeys(file)).keys.find((k) => k.name === "ops")?.id).toBe(id)
    const listed = await keysCli(file, "list")
    expect(listed.out).toMatch(new RegExp(`ops\\s+admin.*${uses[id!]!.slice(0, 16)}`))
    expect(listed.out).toMatch(/dash\s+reader.*never/)
  })
})
