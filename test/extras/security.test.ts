// Security options: with an API key every route (the 56 of the route table and the extra ones)
// answers 401 UNAUTHORIZED without `Authorization: Bearer <key>`, except GET /health, the
// dashboard page GET /ui and the API's description, GET /docs and GET /openapi.json (README,
// Security), and works with
// it (the MCP endpoint too); with local services off, `command` definitions are refused over HTTP
// (store, agent, update) while the services file may still hold them; and the program warns at
// start when it listens beyond loopback without a key (run as a child process). The tests of a
// describe that need the same store share one, in the order they are written (the first checks
// that its refused requests changed nothing, the next ones add services).
import { spawn, type ChildProcess } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { routeTable } from "../../src/http/Api.js"
import { EXTRA_ROUTES } from "../../src/http/extras.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { REPO_ROOT, stdioFixture } from "../fixtures/paths.js"
import { addService, api, authedApi, fixtureService, openSse, rawRequest, startTestServer, storeScript, waitStatus, within, type TestServer } from "../support/index.js"

const KEY = "s3cret-key"

let fixture: HttpFixture
let server: TestServer | undefined

beforeAll(async () => {
  fixture = await startHttpFixture()
})
afterAll(async () => {
  await fixture.stop()
})
afterEach(async () => {
  await server?.cleanup()
  server = undefined
})

/** A JSON answer's body, or undefined when it is not JSON. */
const parsed = (text: string): any => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const fill = (path: string) => path.replace(/:agent_id/g, "a1").replace(/:service_name/g, "svc")
const hasBody = (method: string) => method === "POST" || method === "PUT" || method === "PATCH"

describe("with an API key", () => {
  const routes = [...routeTable(), ...EXTRA_ROUTES].map((r) => ({ method: r.method, path: fill(r.path) }))
  // One store with the key for the three tests.
  let keyed: TestServer
  beforeAll(async () => {
    keyed = await startTestServer({ apiKey: KEY })
  })
  afterAll(async () => {
    await keyed?.cleanup()
  })

  /** The routes README "Security" leaves open: the liveness probe and the dashboard page (which asks for the key). */
  // The open routes: liveness, and the static pages and document (the docs page's calls carry the key).
  // GET /oauth/callback is open too: the browser comes back from an authorization server with no
  // key, and only a single-use state the store handed out finishes anything (test/http/oauth.test.ts);
  // so is its POST, the answer to the question a principal's own authorization asks there.
  // So is the OAuth protected resource metadata (RFC 9728): how a client learns where to get a token.
  // The built-in authorization server's endpoints are open too (each checks its own proof: PKCE, client
  // authentication), and answer 404 when it is off (test/http/oauth-server.test.ts).
  const open = (method: string, path: string) =>
    (method === "GET" &&
      (["/health", "/ui", "/docs", "/openapi.json", "/oauth/callback", "/.well-known/oauth-authorization-server", "/oauth/jwks", "/oauth/authorize"].includes(path) ||
        path.startsWith("/.well-known/oauth-protected-resource"))) ||
    (method === "POST" && ["/oauth/token", "/oauth/revoke", "/oauth/register", "/oauth/callback"].includes(path))

  it("answers every route but GET /health, /ui, /docs and /openapi.json with 401 UNAUTHORIZED without the right Bearer key", async () => {
    const srv = keyed
    expect(routes.length).toBeGreaterThanOrEqual(56 + 8)
    const variants: Array<[string, Record<string, string>]> = [
      ["no header", {}],
      ["a wrong key", { authorization: "Bearer not-the-key" }],
      ["an empty Bearer token", { authorization: "Bearer " }],
      ["a non-Bearer scheme", { authorization: `Basic ${Buffer.from(`user:${KEY}`).toString("base64")}` }],
      ["the bare key", { authorization: KEY }],
      ["the key in another header", { "x-api-key": KEY }]
    ]
    const failures: string[] = []
    await Promise.all(
      routes.flatMap(({ method, path }) =>
        variants.map(async ([label, headers]) => {
          if (open(method, path)) return
          // Over node:http (rawRequest): the same request as fetch would send, for about 40 % less CPU
          // in this process across the sweep's ~380 requests.
          const reply = await rawRequest(
            srv.url + path,
            method,
            hasBody(method) ? JSON.stringify({ name: "svc", url: fixture.url, service_name: "svc" }) : undefined,
            { ...headers, ...(hasBody(method) ? { "content-type": "application/json" } : {}) }
          )
          const body = parsed(reply.text)
          const ok =
            reply.status === 401 &&
            body?.success === false &&
            body?.error?.code === "UNAUTHORIZED" &&
            typeof body?.message === "string" &&
            body.error.message === body.message &&
            typeof body.error.details === "object" &&
            reply.headers["www-authenticate"] === 'Bearer realm="mcp-store"'
          if (!ok) failures.push(`${method} ${path} with ${label}: ${reply.status} ${reply.text.slice(0, 120)}`)
        })
      )
    )
    expect(failures).toEqual([])
    // Nothing the refused requests asked for happened.
    expect((await authedApi(srv.url, KEY).get("/for_store/list_services")).body.services).toEqual([])
  })

  it("answers GET /health and the dashboard page GET /ui without a key", async () => {
    const srv = keyed
    const plain = await srv.get("/health")
    expect(plain.status).toBe(200)
    expect(plain.body).toMatchObject({ success: true, status: "healthy" })
    expect((await srv.request("GET", "/health", { headers: { authorization: "Bearer wrong" } })).status).toBe(200)
    const ui = await srv.get("/ui")
    expect(ui.status).toBe(200)
    expect(ui.headers.get("content-type")).toMatch(/^text\/html/)
    // Only GET: other methods on those paths still need the key.
    expect((await srv.post("/health", {})).status).toBe(401)
    expect((await srv.request("HEAD", "/for_store/list_services")).status).toBe(401)
  })

  it("works with the right key: the API, the event stream, metrics and the MCP endpoint", async () => {
    const srv = keyed
    const authed = authedApi(srv.url, KEY)
    expect((await authed.get("/")).status).toBe(200)
    await addService(authed, "/for_store", { name: "alpha", url: fixture.url })
    await waitStatus(authed, "/for_store", "alpha", "healthy")
    const call = await authed.post("/for_store/call_tool", { tool_name: "alpha__echo", args: { text: "ok" } })
    expect(call.status).toBe(200)
    expect(call.body.result).toBe("ok")
    expect((await authed.get("/metrics")).status).toBe(200)
    expect((await authed.get("/inspect/actors")).status).toBe(200)
    expect((await authed.get("/show_mcpconfig")).status).toBe(404)

    const events = await openSse(`${srv.url}/events`, { authorization: `Bearer ${KEY}` })
    try {
      expect(events.status).toBe(200)
      await events.until(() => events.comments.includes("connected"), 2000, "the connected comment")
    } finally {
      events.close()
    }

    const client = new Client({ name: "security-test", version: "1.0.0" })
    client.onerror = () => undefined
    const transport = new StreamableHTTPClientTransport(new URL(`${srv.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${KEY}` } },
      reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100, maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 }
    })
    try {
      await within(client.connect(transport), 10_000, "MCP connect with the key")
      const tools = await within(client.listTools(), 5000, "tools/list")
      expect(tools.tools.map((t) => t.name)).toContain("alpha__echo")
      const result = await within(client.callTool({ name: "alpha__echo", arguments: { text: "via mcp" } }), 5000, "tools/call")
      expect(result.content).toEqual([{ type: "text", text: "via mcp" }])
    } finally {
      await within(client.close(), 3000, "client close").catch(() => undefined)
    }

    // Without the key the SDK client cannot even initialize.
    const refused = new Client({ name: "no-key", version: "1.0.0" })
    refused.onerror = () => undefined
    await expect(within(refused.connect(new StreamableHTTPClientTransport(new URL(`${srv.url}/mcp`))), 10_000, "MCP connect without key")).rejects.toThrow()
    await refused.close().catch(() => undefined)
  })
})

describe("with local services off", () => {
  const local = (name: string) => fixtureService(name)
  const { command, args } = stdioFixture()
  // One store without local services for the first two tests (the third starts with a services file).
  let remoteOnly: TestServer
  beforeAll(async () => {
    remoteOnly = await startTestServer({ localServices: false })
  })
  afterAll(async () => {
    await remoteOnly?.cleanup()
  })

  it("refuses command definitions in add_service (store and agent) with 400 naming the field, writing nothing", async () => {
    const srv = remoteOnly
    const before = srv.readFileText()
    const bodies: Array<[string, unknown, string]> = [
      ["/for_store/add_service", local("loc"), "loc.command"],
      ["/for_store/add_service?wait=1", { mcpServers: { loc: { command, args }, web: { url: fixture.url } } }, "loc.command"],
      ["/for_store/add_service", [{ name: "web", url: fixture.url }, local("loc2")], "loc2.command"],
      ["/for_agent/a1/add_service", local("loc"), "loc.command"],
      ["/for_agent/a1/add_service", { name: "loc", command: "sh", type: "stdio" }, "loc.command"]
    ]
    for (const [path, body, field] of bodies) {
      const reply = await srv.post(path, body)
      expect(reply.status, `${path} ${JSON.stringify(body)}`).toBe(400)
      expect(reply.body).toMatchObject({
        success: false,
        error: { code: "VALIDATION_ERROR", message: reply.body.message, details: { fields: expect.arrayContaining([expect.objectContaining({ field })]) } }
      })
      expect(reply.body.message).toContain("command")
    }
    // Nothing was written or registered (not even the URL service sent along with a local one).
    expect(srv.readFileText()).toBe(before)
    expect((await srv.get("/for_store/list_services?scope=all")).body.services).toEqual([])
    expect((await srv.get("/for_store/list_all_agents")).body.total_agents).toBe(0)
  })

  it("still accepts URL services, and refuses update_service to a command definition", async () => {
    const srv = remoteOnly
    await addService(srv, "/for_store", { name: "web", url: fixture.url })
    await addService(srv, "/for_agent/a1", { name: "web", url: fixture.url })
    await waitStatus(srv, "/for_store", "web", "healthy")
    expect((await srv.post("/for_store/call_tool", { tool_name: "web__echo", args: { text: "x" } })).body.result).toBe("x")
    const before = srv.readFileText()

    const reply = await srv.request("PUT", "/for_store/update_service/web", {
      body: JSON.stringify({ command, args }),
      headers: { "content-type": "application/json" }
    })
    expect(reply.status).toBe(400)
    expect(reply.body).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR", details: { fields: [expect.objectContaining({ field: "web.command" })] } } })
    expect(srv.readFileText()).toBe(before)
    const info = await srv.get("/for_store/get_service_info?name=web")
    expect(info.body.service).toMatchObject({ url: fixture.url, command: null, transport_type: "streamable_http" })
    // An update that stays a URL service is still allowed.
    const ok = await srv.request("PUT", "/for_store/update_service/web", {
      body: JSON.stringify({ url: fixture.url, headers: { "x-test": "1" } }),
      headers: { "content-type": "application/json" }
    })
    expect(ok.status).toBe(200)
  })

  it("still loads and runs command services written in the services file", async () => {
    const { name: _name, ...definition } = fixtureService("loc")
    const srv = (server = await startTestServer({ localServices: false, services: { mcpServers: { loc: definition } } }))
    await waitStatus(srv, "/for_store", "loc", "healthy", 15)
    const call = await srv.post("/for_store/call_tool", { tool_name: "loc__add", args: { a: 2, b: 3 } })
    expect(call.status).toBe(200)
    expect(call.body.result).toBe("5")
    // Restarting it (no new definition) is not an add: allowed.
    expect((await srv.post("/for_store/restart_service", { service_name: "loc" })).status).toBe(200)
  })
})

describe("the start-up warning (mcp-store run api as a child process)", { timeout: 120_000 }, () => {
  interface Run {
    readonly child: ChildProcess
    stdout: string
    stderr: string
    readonly exited: Promise<number | string | null>
    /** Resolves once `stream` contains `text`; rejects after `ms`. */
    waitFor(stream: "stdout" | "stderr", text: string | RegExp, ms: number): Promise<void>
  }
  // The children and folders of each (concurrent) test, by test id: afterEach ends only its own.
  const owned = new Map<string, { children: ChildProcess[]; dirs: string[] }>()
  const own = (testId: string) => {
    let entry = owned.get(testId)
    if (entry === undefined) owned.set(testId, (entry = { children: [], dirs: [] }))
    return entry
  }

  // The program: its bundle (test/support/programs.ts), built once for the run.
  let program = ""
  beforeAll(async () => {
    program = await storeScript()
  }, 120_000)

  const run = (testId: string, args: ReadonlyArray<string>): Run => {
    const dir = mkdtempSync(join(tmpdir(), "mcp-store-cli-"))
    own(testId).dirs.push(dir)
    // The child's options come from the command line only.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("MCPSTORE_")))
    const child = spawn(process.execPath, [program, "run", "api", "--port", "0", "--config", join(dir, "mcp.json"), ...args], {
      cwd: REPO_ROOT,
      env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    own(testId).children.push(child)
    const exited = new Promise<number | string | null>((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal)))
    const out: Run = {
      child,
      stdout: "",
      stderr: "",
      exited,
      waitFor: (stream, text, ms) =>
        new Promise<void>((resolve, reject) => {
          const has = () => (typeof text === "string" ? out[stream].includes(text) : text.test(out[stream]))
          const check = () => {
            if (!has()) return
            clearTimeout(timer)
            child[stream]!.off("data", check)
            resolve()
          }
          const timer = setTimeout(() => {
            child[stream]!.off("data", check)
            reject(new Error(`no ${String(text)} on ${stream} within ${ms} ms; stdout: ${out.stdout}; stderr: ${out.stderr}`))
          }, ms)
          child[stream]!.on("data", check)
          // After the exit, once both pipes are read to their end.
          child.once("close", () => (has() ? check() : undefined))
          check()
        })
    }
    child.stdout!.setEncoding("utf8").on("data", (c: string) => (out.stdout += c))
    child.stderr!.setEncoding("utf8").on("data", (c: string) => (out.stderr += c))
    return out
  }

  /**
   * SIGTERM, then wait (bounded) for the exit and the end of both pipes. Tests call it once the
   * banner or the warning has arrived: src/main.ts installs its SIGTERM handler before it starts the
   * server and prints them, so the signal is handled (a clean shutdown, exit code 0), not fatal.
   */
  const stop = async (r: Run) => {
    r.child.kill("SIGTERM")
    const code = await within(r.exited, 10_000, "exit after SIGTERM")
    await within(
      Promise.all([r.child.stdout, r.child.stderr].map((s) => (s!.readableEnded ? undefined : new Promise((res) => s!.once("end", res))))),
      2000,
      "pipes closed"
    )
    return code
  }

  afterEach(async ({ task }) => {
    const entry = owned.get(task.id)
    owned.delete(task.id)
    for (const child of entry?.children ?? []) {
      if (child.exitCode !== null || child.signalCode !== null) continue
      child.kill("SIGKILL")
      await within(new Promise((resolve) => child.once("exit", resolve)), 5000, "killed child exit").catch(() => undefined)
    }
    for (const dir of entry?.dirs ?? []) rmSync(dir, { recursive: true, force: true })
  })

  // Each start of the program takes a second or two, far more while the whole suite loads both
  // cores: the waits are for a line, with room for that. The three runs go side by side.
  it.concurrent("warns on --host 0.0.0.0 without a key", async ({ expect, task }) => {
    const r = run(task.id, ["--host", "0.0.0.0"])
    await r.waitFor("stderr", / WARN .*API key.*\n/, 90_000)
    // One logger, one style (src/logging/log.ts): time, level, message.
    const line = r.stderr.split("\n").find((l) => l.includes(" WARN "))!
    expect(line).toMatch(/^\S+Z WARN  listening on 0\.0\.0\.0 without an API key/)
    expect(line).toContain("local command services are refused from non-loopback clients")
    expect(line).toContain("--api-key")
    expect(r.stderr).toMatch(/local services\s+loopback clients only/)
    // The warning names the real port, which the server answers on.
    const port = Number(/port (\d+)/.exec(line)?.[1])
    expect(port).toBeGreaterThan(0)
    expect((await api(`http://127.0.0.1:${port}`).get("/health")).status).toBe(200)
    expect(await stop(r)).toBe(0)
  })

  it.concurrent("does not warn on --host 127.0.0.1", async ({ expect, task }) => {
    const r = run(task.id, ["--host", "127.0.0.1"])
    await r.waitFor("stderr", /reload\s+off/, 90_000)
    expect(r.stderr).toMatch(/listening on\s+http:\/\/127\.0\.0\.1:\d+/)
    expect(await stop(r)).toBe(0)
    expect(r.stderr).toContain("SIGTERM: shutting down")
    expect(r.stderr).not.toMatch(/ WARN /)
  })

  it.concurrent("does not warn on --host 0.0.0.0 with --api-key", async ({ expect, task }) => {
    const r = run(task.id, ["--host", "0.0.0.0", "--api-key", "x"])
    await r.waitFor("stderr", /reload\s+off/, 90_000)
    expect(r.stderr).toMatch(/listening on\s+http:\/\/0\.0\.0\.0:\d+/)
    expect(await stop(r)).toBe(0)
    expect(r.stderr).toContain("SIGTERM: shutting down")
    expect(r.stderr).not.toMatch(/ WARN /)
  })
})
