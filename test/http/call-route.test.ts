// The direct call route (src/http/call-route.ts) against the HttpApi path it stands in for: the same
// requests to a server with the route and to one without it (directCalls: false) get the same
// status, headers and body, guards and errors included; which requests the route takes at all; a
// 429's Retry-After from its body; and a call it serves is measured (monitor, metrics) and recorded
// like any other.
import { request as httpRequest } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { KeyRing } from "../../src/config/api-keys.js"
import { resolveOptions } from "../../src/config/options.js"
import { inOrder, retryAfterHeader } from "../../src/http/call-route.js"
import { requestPolicy } from "../../src/http/request-guard.js"
import type { RunningServer } from "../../src/http/server.js"
import { FAST_MONITORING, fixtureService, freshDir, parsePrometheus, sampleValue } from "../support/index.js"

const KEY = "call-route-key"
const MAX_BODY = 4096

interface Answer {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly text: string
}

const send = (base: string, method: string, path: string, headers: Record<string, string>, body?: string, chunked = false): Promise<Answer> =>
  new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { method, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }))
      res.on("error", reject)
    })
    req.on("error", reject)
    if (chunked && body !== undefined) {
      req.write(body.slice(0, 5))
      req.end(body.slice(5))
    } else req.end(body)
  })

/** What must match between the two paths: status, the headers that carry meaning, the body less its per-call values. */
const comparable = (a: Answer) => {
  let body: unknown = a.text
  try {
    body = JSON.parse(a.text, (key, value: unknown) =>
      key === "trace_id" || key === "span_id" || key === "duration_ms" ? "<varies>" : typeof value === "string" ? value.replace(/trace_id [\w-]+/g, "trace_id <varies>") : value
    )
  } catch {
    // not JSON: compared as text
  }
  const header = (name: string) => a.headers[name]
  return {
    status: a.status,
    body,
    headers: Object.fromEntries(
      ["content-type", "x-content-type-options", "www-authenticate", "retry-after", "access-control-allow-origin", "vary"].map((h) => [h, header(h)])
    ),
    lengthMatches: header("content-length") === undefined || Number(header("content-length")) === Buffer.byteLength(a.text)
  }
}

const start = async (directCalls: boolean): Promise<RunningServer & { dir: string }> => {
  const dir = freshDir()
  const resolved = resolveOptions({
    log_level: "error",
    host: "127.0.0.1",
    port: 0,
    show_startup_info: false,
    mcp_config_file: `${dir}/mcp.json`,
    monitoring: FAST_MONITORING,
    api_key: KEY,
    max_body_bytes: MAX_BODY
  })
  const { startServer } = await import("../../src/http/server.js")
  const running = await startServer({ server: resolved.server, store: resolved.store, graceMs: 200, directCalls })
  const added = await send(running.url, "POST", "/for_store/add_service?wait=15", { authorization: `Bearer ${KEY}`, "content-type": "application/json" }, JSON.stringify(fixtureService("fx")))
  expect(added.status).toBe(200)
  const agent = await send(running.url, "POST", "/for_agent/agent-1/add_service?wait=15", { authorization: `Bearer ${KEY}`, "content-type": "application/json" }, JSON.stringify(fixtureService("fa")))
  expect(agent.status).toBe(200)
  return Object.assign(running, { dir })
}

describe("the direct call route", { timeout: 30_000 }, () => {
  let direct: RunningServer
  let framework: RunningServer

  beforeAll(async () => {
    ;[direct, framework] = await Promise.all([start(true), start(false)])
  }, 40_000)
  afterAll(async () => {
    await Promise.all([direct?.close(), framework?.close()])
  }, 15_000)

  const json = { "content-type": "application/json", authorization: `Bearer ${KEY}` }
  const body = (value: unknown) => JSON.stringify(value)
  const deep = `{"tool_name":"fx__echo","args":{"a":${"[".repeat(70)}${"]".repeat(70)}}}`
  const cases: ReadonlyArray<{ name: string; path: string; headers: (host: string) => Record<string, string>; body?: string; chunked?: boolean }> = [
    { name: "a call", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", args: { text: "hi" } }) },
    { name: "use_tool", path: "/for_store/use_tool", headers: () => json, body: body({ tool_name: "echo", args: { text: "hi" }, service_name: "fx" }) },
    { name: "an agent's call", path: "/for_agent/agent-1/call_tool", headers: () => json, body: body({ tool_name: "fa__echo", args: { text: "hi" } }) },
    { name: "an agent's use_tool", path: "/for_agent/agent-1/use_tool", headers: () => json, body: body({ tool_name: "echo", args: { text: "hi" } }) },
    { name: "another agent's tool", path: "/for_agent/agent-2/call_tool", headers: () => json, body: body({ tool_name: "fa__echo", args: { text: "hi" } }) },
    { name: "a malformed agent id", path: "/for_agent/bad!id/call_tool", headers: () => json, body: body({ tool_name: "echo" }) },
    { name: "a percent-encoded agent id", path: "/for_agent/agent%2D1/call_tool", headers: () => json, body: body({ tool_name: "fa__echo", args: { text: "hi" } }) },
    { name: "a tool error", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__fail", args: {} }) },
    { name: "an unknown tool", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__nope" }) },
    { name: "an unknown service", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "echo", service_name: "nope" }) },
    { name: "a near-miss tool name (did you mean)", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__ech", args: { text: "hi" } }) },
    { name: "a near-miss service name (did you mean)", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "echo", service_name: "fy" }) },
    { name: "an unknown field", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", agrs: { text: "hi" } }) },
    { name: "arguments, the alias of args", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", arguments: { text: "hi" } }) },
    { name: "args and arguments both", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", args: {}, arguments: { text: "hi" } }) },
    { name: "arguments the tool refuses", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", args: { text: 5 } }) },
    { name: "no tool_name", path: "/for_store/call_tool", headers: () => json, body: body({ args: {} }) },
    { name: "fields of the wrong type", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: 5, args: [], timeout: 0 }) },
    { name: "a time-out out of range", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", timeout: 4000 }) },
    { name: "malformed JSON", path: "/for_store/call_tool", headers: () => json, body: '{"tool_name": ' },
    { name: "a JSON array", path: "/for_store/call_tool", headers: () => json, body: "[1]" },
    { name: "a JSON string", path: "/for_store/call_tool", headers: () => json, body: '"x"' },
    { name: "JSON null", path: "/for_store/call_tool", headers: () => json, body: "null" },
    { name: "a body nested too deep", path: "/for_store/call_tool", headers: () => json, body: deep },
    { name: "no API key (401)", path: "/for_store/call_tool", headers: () => ({ "content-type": "application/json" }), body: body({ tool_name: "fx__echo" }) },
    { name: "a wrong API key (401)", path: "/for_store/call_tool", headers: () => ({ ...json, authorization: "Bearer nope" }), body: body({ tool_name: "fx__echo" }) },
    { name: "the key in lower case scheme", path: "/for_store/call_tool", headers: () => ({ ...json, authorization: `bearer ${KEY}` }), body: body({ tool_name: "fx__echo", args: { text: "hi" } }) },
    { name: "a foreign Host (403)", path: "/for_store/call_tool", headers: () => ({ ...json, host: "evil.example:80" }), body: body({ tool_name: "fx__echo" }) },
    { name: "a foreign Origin (403)", path: "/for_store/call_tool", headers: () => ({ ...json, origin: "https://evil.example" }), body: body({ tool_name: "fx__echo" }) },
    { name: "its own Origin", path: "/for_store/call_tool", headers: (host) => ({ ...json, origin: `http://${host}` }), body: body({ tool_name: "fx__echo", args: { text: "hi" } }) },
    { name: "a cross-site fetch (403)", path: "/for_store/call_tool", headers: () => ({ ...json, "sec-fetch-site": "cross-site" }), body: body({ tool_name: "fx__echo" }) },
    { name: "text/plain (415)", path: "/for_store/call_tool", headers: () => ({ ...json, "content-type": "text/plain" }), body: body({ tool_name: "fx__echo" }) },
    { name: "JSON with a charset", path: "/for_store/call_tool", headers: () => ({ ...json, "content-type": "application/json; charset=utf-8" }), body: body({ tool_name: "fx__echo", args: { text: "hi" } }) },
    { name: "over the body limit (413)", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", args: { text: "x".repeat(MAX_BODY) } }) },
    { name: "a chunked body", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", args: { text: "hi" } }), chunked: true },
    { name: "a chunked body over the limit (413)", path: "/for_store/call_tool", headers: () => json, body: body({ tool_name: "fx__echo", args: { text: "x".repeat(MAX_BODY) } }), chunked: true },
    { name: "a query string", path: "/for_store/call_tool?x=1", headers: () => json, body: body({ tool_name: "fx__echo", args: { text: "hi" } }) },
    { name: "a trailing slash", path: "/for_store/call_tool/", headers: () => json, body: body({ tool_name: "fx__echo", args: { text: "hi" } }) }
  ]

  it.each(cases)("$name: the same answer as through HttpApi", async (c) => {
    const ask = (server: RunningServer) => {
      const host = new URL(server.url).host
      return send(server.url, "POST", c.path, { host, ...c.headers(host) }, c.body, c.chunked)
    }
    const [a, b] = await Promise.all([ask(direct), ask(framework)])
    expect(comparable(a)).toEqual(comparable(b))
    expect(comparable(a).lengthMatches).toBe(true)
  })

  it("takes only requests that are plainly in order; everything else is HttpApi's", () => {
    const policy = requestPolicy({ host: "127.0.0.1", allowedHosts: [], allowedOrigins: [] }, () => 8000)
    const keys = new KeyRing(join(tmpdir(), "no-such-dir", "keys.json"), [KEY])
    keys.loadSync()
    const takes = inOrder({ policy, keys, maxBodyBytes: MAX_BODY, debug: false })
    const ok = { host: "127.0.0.1:8000", "content-type": "application/json", "content-length": "20", authorization: `Bearer ${KEY}` }
    expect(takes(ok)).toBe(true)
    expect(takes({ ...ok, authorization: `bearer ${KEY}` })).toBe(true)
    for (const refused of [
      { ...ok, host: "evil.example:8000" },
      { ...ok, host: "127.0.0.1:8001" },
      { ...ok, host: undefined },
      { ...ok, origin: "http://127.0.0.1:8000" },
      { ...ok, "sec-fetch-site": "cross-site" },
      { ...ok, "sec-fetch-site": "same-site" },
      { ...ok, authorization: undefined },
      { ...ok, authorization: "Bearer nope" },
      { ...ok, authorization: KEY },
      { ...ok, "content-type": "text/plain" },
      { ...ok, "content-type": undefined },
      { ...ok, "content-length": undefined, "transfer-encoding": "chunked" },
      { ...ok, "transfer-encoding": "chunked" },
      { ...ok, "content-length": "0" },
      { ...ok, "content-length": String(MAX_BODY + 1) },
      { ...ok, "content-length": "x" }
    ]) {
      expect(takes(refused), JSON.stringify(refused)).toBe(false)
    }
    expect(inOrder({ policy, keys: undefined, maxBodyBytes: MAX_BODY, debug: false })({ ...ok, authorization: undefined })).toBe(true)
    expect(inOrder({ policy, keys, maxBodyBytes: MAX_BODY, debug: true })(ok)).toBe(false)
  })

  it("Retry-After of a 429 names its wait (1 s when none is named), none when trying again cannot help (retry_after_seconds null)", () => {
    const tooMany = (seconds?: number | null) => ({ error: { code: "TOO_MANY", details: seconds === undefined ? {} : { retry_after_seconds: seconds } } })
    expect(retryAfterHeader(429, tooMany(5))).toBe("5")
    expect(retryAfterHeader(429, tooMany())).toBe("1")
    expect(retryAfterHeader(429, tooMany(null))).toBeUndefined()
    expect(retryAfterHeader(503, tooMany(2))).toBe("2")
    expect(retryAfterHeader(503, tooMany(null))).toBeUndefined()
  })

  it("measures and records every call it serves, as HttpApi does", async () => {
    const metrics = async () => {
      const res = await send(direct.url, "GET", "/metrics", { authorization: `Bearer ${KEY}` })
      return sampleValue(parsePrometheus(res.text), "mcpstore_http_requests_total", { method: "POST", status: "200" })
    }
    const recorded = async () => {
      const res = await send(direct.url, "GET", "/for_store/tool_records?limit=1", { authorization: `Bearer ${KEY}` })
      return (JSON.parse(res.text) as { total: number }).total
    }
    const [requestsBefore, metricBefore, recordsBefore] = [direct.monitor.requestsTotal, await metrics(), await recorded()]
    for (let i = 0; i < 5; i++) {
      const res = await send(direct.url, "POST", "/for_store/call_tool", json, body({ tool_name: "fx__echo", args: { text: `m${i}` } }))
      expect(res.status).toBe(200)
    }
    expect(await metrics()).toBe(metricBefore + 5)
    expect(await recorded()).toBe(recordsBefore + 5)
    // The five calls, two GET /metrics and two GET /for_store/tool_records.
    expect(direct.monitor.requestsTotal).toBe(requestsBefore + 5 + 4)
  })
})
