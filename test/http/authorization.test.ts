// The API key as the contract's bearer security (src/http/authorization.ts): checked before
// anything else looks at a request, so without the key a bad body, an oversized one, an unknown
// path or a wrong method is answered 401, never 400, 413, 415, 404 or 405; with no key configured
// the same requests get those answers. The OpenAPI document declares the bearer scheme for every
// operation but GET /health.
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { resolveOptions } from "../../src/config/options.js"
import { startServer, type RunningServer } from "../../src/http/server.js"

const KEY = "s3cret-key"

/** A server on a random port with a fresh services file, with or without `--api-key`. */
const start = async (apiKey: string | undefined) => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-auth-"))
  const options = resolveOptions({
    host: "127.0.0.1",
    port: 0,
    show_startup_info: false,
    log_level: "error",
    mcp_config_file: join(dir, "mcp.json"),
    max_body_bytes: 1024,
    ...(apiKey === undefined ? {} : { api_key: apiKey })
  })
  const running = await startServer({ server: options.server, store: options.store, graceMs: 100 })
  return { running, cleanup: async () => (await running.close(), rmSync(dir, { recursive: true, force: true })) }
}

/** The requests that fail before any handler runs, each with the answer it gets when no key is needed. */
const refusedBeforeHandlers: ReadonlyArray<readonly [string, string, string, RequestInit, number]> = [
  ["a text/plain body", "POST", "/for_store/add_service", { headers: { "content-type": "text/plain" }, body: "{}" }, 415],
  ["an oversized body", "POST", "/for_store/add_service", { headers: { "content-type": "application/json" }, body: JSON.stringify({ pad: "x".repeat(2048) }) }, 413],
  ["malformed JSON", "POST", "/for_store/add_service", { headers: { "content-type": "application/json" }, body: "{" }, 400],
  ["an unknown path", "GET", "/no/such/route", {}, 404],
  ["a wrong method", "DELETE", "/for_store/list_services", {}, 405]
]

describe("with an API key", () => {
  let server: Awaited<ReturnType<typeof start>>
  beforeAll(async () => {
    server = await start(KEY)
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it.each(refusedBeforeHandlers)("answers %s without the key with 401 and the challenge", async (_label, method, path, init) => {
    const reply = await fetch(server.running.url + path, { ...init, method })
    expect(reply.status).toBe(401)
    expect(reply.headers.get("www-authenticate")).toBe('Bearer realm="mcp-store"')
    expect(await reply.json()).toMatchObject({ success: false, error: { code: "UNAUTHORIZED" } })
  })

  it.each(refusedBeforeHandlers)("answers %s with the key as without one", async (_label, method, path, init, status) => {
    const reply = await fetch(server.running.url + path, { ...init, method, headers: { ...(init.headers as Record<string, string>), authorization: `bearer ${KEY}` } })
    expect(reply.status).toBe(status)
    expect(reply.headers.get("www-authenticate")).toBeNull()
  })

  it("documents the bearer scheme for every operation but GET /health", async () => {
    const reply = await fetch(`${server.running.url}/openapi.json`, { headers: { authorization: `Bearer ${KEY}` } })
    expect(reply.status).toBe(200)
    const doc = (await reply.json()) as { security: unknown; components: { securitySchemes: Record<string, any> }; paths: Record<string, Record<string, { security?: unknown }>> }
    expect(doc.components.securitySchemes["bearer"]).toMatchObject({ type: "http", scheme: "bearer" })
    expect(doc.security).toEqual([{ bearer: [] }])
    expect(doc.paths["/health"]?.["get"]?.security).toEqual([])
    const overridden = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([, op]) => op.security !== undefined)
        .map(([method]) => `${method.toUpperCase()} ${path}`)
    )
    expect(overridden).toEqual(["GET /health"])
  })
})

describe("without an API key", () => {
  let server: Awaited<ReturnType<typeof start>>
  beforeAll(async () => {
    server = await start(undefined)
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it.each(refusedBeforeHandlers)("answers %s as the contract says, with no challenge", async (_label, method, path, init, status) => {
    const reply = await fetch(server.running.url + path, { ...init, method })
    expect(reply.status).toBe(status)
    expect(reply.headers.get("www-authenticate")).toBeNull()
  })

  it("answers every kind of route with no header at all", async () => {
    for (const path of ["/for_store/list_services", "/health", "/openapi.json", "/metrics", "/inspect/machines"]) {
      expect((await fetch(server.running.url + path)).status, path).toBe(200)
    }
  })
})
