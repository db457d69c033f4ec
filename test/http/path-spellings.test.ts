// Access by route, whatever the path's spelling: a route answers only at the path the contract
// writes, so that a key's role, an access token's scope and the open routes are decided on the path
// the router runs. Another spelling of a refused route (a doubled or trailing slash, other letter
// case, a percent-encoded letter, a `;` parameter, the absolute form) is refused or not found,
// never served. Real store, keys made by the CLI's code path, raw HTTP requests.
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { pathOf } from "../../src/http/contract-middleware.js"
import { scopeNeeded } from "../../src/http/oauth-resource/scopes.js"
import { addService, authedApi, createKey, fixtureService, freshDir, rawRequest, startTestServer, type TestServer } from "../support/index.js"

/** One request with `target` as the request line's target, as sent (no URL parsing), with `key`. */
const send = (url: string, method: string, target: string, key: string) =>
  rawRequest(url, method, undefined, { authorization: `Bearer ${key}`, accept: "application/json" }, target)

/** The spellings of `path` a router may read as it: each must be refused, or be no route at all. */
const spellings = (origin: string, path: string): string[] => {
  const [, first, rest] = /^\/([^/]+)(.*)$/.exec(path)!
  return [
    `/${path}`,
    path.replace(/\/(?=[^/]*$)/, "//"),
    `${path}/`,
    path.toUpperCase(),
    `/${first!.toUpperCase()}${rest}`,
    path.replace(/[a-z]/, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`),
    path.replace("_", "%5F"),
    `${path};x=1`,
    `${origin}${path}`,
    // The router reads the first character as "/", whatever it is.
    `*${path.slice(1)}`
  ]
}

describe("the path a request's access is decided on", () => {
  it("is the router's: the absolute form's host dropped, cut at ? ; #, letters decoded, an encoded % and / kept for the parameter", () => {
    expect(pathOf("/for_store/show_config?x=1")).toBe("/for_store/show_config")
    expect(pathOf("/for_store/show_config;x=1")).toBe("/for_store/show_config")
    expect(pathOf("/for_store/show_config#x")).toBe("/for_store/show_config")
    expect(pathOf("http://127.0.0.1:1/for_store/show_config")).toBe("/for_store/show_config")
    expect(pathOf("*for_store/show_config")).toBe("/for_store/show_config")
    expect(pathOf("/for_store/show%5Fconfig")).toBe("/for_store/show_config")
    expect(pathOf("/for_agent/a%2Fb%25c/list_services")).toBe("/for_agent/a%2Fb%25c/list_services")
    expect(pathOf("/for_store/service_status/%E0%A4%A")).toBe("/for_store/service_status/%E0%A4%A")
    // An access token's scope follows: the MCP face needs the tools scope however it is spelled.
    expect(scopeNeeded("GET", pathOf("/%6Dcp"))).toBe(scopeNeeded("GET", "/mcp"))
    expect(scopeNeeded("GET", pathOf("/for_store/show%5Fconfig"))).toBe(scopeNeeded("GET", "/for_store/show_config"))
  })
})

describe("access whatever the path's spelling", () => {
  let server: TestServer
  const keys = {} as Record<"admin" | "reader" | "agentA", string>

  beforeAll(async () => {
    const dir = freshDir()
    const file = join(dir, "mcp-store.keys.json")
    keys.admin = await createKey(file, "--role", "admin", "--name", "ops")
    keys.reader = await createKey(file, "--role", "reader", "--name", "dash")
    keys.agentA = await createKey(file, "--role", "agent", "--agent", "agent-a", "--name", "a")
    server = await startTestServer({ dir })
    const admin = authedApi(server.url, keys.admin)
    await Promise.all([addService(admin, "/for_store", fixtureService("svc")), addService(admin, "/for_agent/agent-b", fixtureService("svc"))])
  }, 60_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("a reader gets the secret reads and the MCP face at no spelling", async () => {
    // Each as written is refused 403 to the reader, and served to the admin.
    for (const path of ["/for_store/show_config", "/for_store/show_mcpconfig", "/for_agent/agent-b/show_mcpconfig", "/inspect/actors"]) {
      expect((await send(server.url, "GET", path, keys.reader)).status, path).toBe(403)
      expect((await send(server.url, "GET", path, keys.admin)).status, path).toBe(200)
      for (const target of spellings(server.url, path)) {
        const reply = await send(server.url, "GET", target, keys.reader)
        expect([403, 404], `${target}: ${reply.status} ${reply.text.slice(0, 200)}`).toContain(reply.status)
      }
    }
    for (const target of ["/MCP", "/mcp/", "//mcp", "/mcp;x", "/%6Dcp", `${server.url}/mcp`]) {
      const reply = await send(server.url, "GET", target, keys.reader)
      expect([403, 404], `${target}: ${reply.status} ${reply.text.slice(0, 200)}`).toContain(reply.status)
    }
  })

  it("an agent's key reaches another agent's routes at no spelling", async () => {
    const path = "/for_agent/agent-b/list_services"
    expect((await send(server.url, "GET", path, keys.agentA)).status).toBe(403)
    for (const target of [...spellings(server.url, path), "/for_agent/agent%2Db/list_services", "/for_agent/AGENT-B/list_services"]) {
      const reply = await send(server.url, "GET", target, keys.agentA)
      expect([403, 404], `${target}: ${reply.status} ${reply.text.slice(0, 200)}`).toContain(reply.status)
    }
  })

  it("the dashboard's page carries its protective headers at any spelling that serves it", async () => {
    for (const target of ["/ui", "/ui;x", "/%75i"]) {
      const reply = await rawRequest(server.url, "GET", undefined, {}, target)
      if (reply.status !== 200) continue
      expect(reply.headers["x-frame-options"], target).toBe("DENY")
      expect(String(reply.headers["content-security-policy"]), target).toContain("frame-ancestors 'none'")
    }
  })

  it("the routes answer at their own spelling, with a path parameter percent-encoded as a client may", async () => {
    const admin = authedApi(server.url, keys.admin)
    expect((await admin.get("/for_store/list_services")).status).toBe(200)
    const reply = await send(server.url, "GET", "/for_store/service_status/%73vc", keys.admin)
    expect(reply.status, reply.text).toBe(200)
    expect(JSON.parse(reply.text)).toMatchObject({ name: "svc" })
  })
})
