/**
 * Every wait ends when its client goes away: the handler's fiber is interrupted, and with it the
 * Effect that waits on the actor (src/runtime/bridge.ts), so its subscription and its place among
 * the waiters are given back at once, not when its time-out passes. Before the runtime was
 * Effect-native, add_service `?wait` ran without the request's signal and kept waiting. A call_tool
 * taken by the direct call route without a fiber is cancelled the same way (`StartedCall.abandon`).
 * Either way the request is counted 499 (the client closed it), never 500: the store did not fail.
 */
import { request as httpRequest } from "node:http"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { gatedStdioFixture, stdioFixture } from "../fixtures/paths.js"
import { eventually, startTestServer, type TestServer } from "../support/index.js"

let server: TestServer | undefined

/** The POST requests counted with `status` (the Prometheus metrics). */
const posts = async (status: number): Promise<number> => {
  const text = (await (server as TestServer).get("/metrics")).text
  return Number(new RegExp(`^mcpstore_http_requests_total\\{method="POST",status="${status}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? 0)
}
afterEach(async () => {
  await server?.cleanup()
  server = undefined
})

describe("a client that goes away", () => {
  it("ends add_service ?wait at once; the change it made stays", async () => {
    server = await startTestServer({ services: { mcpServers: {} }, monitoring: { initialization_timeout_seconds: 60 } })
    const store = server.running.store
    // A service that never leaves `initializing` while the gate file is missing.
    const launch = gatedStdioFixture(join(server.dir, "never-opened"))
    const controller = new AbortController()
    const request = fetch(`${server.url}/for_store/add_service?wait=30`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "slow", command: launch.command, args: [...launch.args] }),
      signal: controller.signal
    }).catch((e: unknown) => e)
    expect(await eventually(() => store.waiters.active === 1, 10_000)).toBe(true)
    controller.abort()
    expect(await request).toBeInstanceOf(Error)
    expect(await eventually(() => store.waiters.active === 0, 5_000)).toBe(true)
    expect(Object.keys((server.readFile() as { mcpServers: object }).mcpServers)).toEqual(["slow"])
    expect(store.serviceActor({ kind: "store" }, "slow")).toBeDefined()
  })

  it("ends wait_service at once", async () => {
    server = await startTestServer({ services: { mcpServers: {} }, monitoring: { initialization_timeout_seconds: 60 } })
    const store = server.running.store
    const launch = gatedStdioFixture(join(server.dir, "never-opened"))
    expect((await server.post("/for_store/add_service", { name: "slow", command: launch.command, args: [...launch.args] })).status).toBe(200)
    const controller = new AbortController()
    const request = fetch(`${server.url}/for_store/wait_service`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ client_id_or_service_name: "slow", status: "healthy", timeout: 300 }),
      signal: controller.signal
    }).catch((e: unknown) => e)
    expect(await eventually(() => store.waiters.active === 1, 10_000)).toBe(true)
    controller.abort()
    expect(await request).toBeInstanceOf(Error)
    expect(await eventually(() => store.waiters.active === 0, 5_000)).toBe(true)
    // Through HttpApi: counted as its server answers a client gone.
    expect(await eventually(async () => (await posts(499)) === 1, 5_000)).toBe(true)
    expect(await posts(500)).toBe(0)
  })

  it("cancels call_tool at once: the call leaves the in-flight count and is recorded as cancelled", async () => {
    const launch = stdioFixture()
    server = await startTestServer({ services: { mcpServers: { fx: { command: launch.command, args: [...launch.args] } } } })
    const store = server.running.store
    const ready = await server.post("/for_store/wait_service", { client_id_or_service_name: "fx", status: "healthy", timeout: 15 })
    expect(ready.status, ready.text).toBe(200)
    // A plain request of the direct call route (src/http/call-route.ts): JSON, its length, no Origin.
    const body = JSON.stringify({ tool_name: "sleep", service_name: "fx", args: { ms: 60_000 } })
    const { port } = new URL(server.url)
    const request = httpRequest({
      host: "127.0.0.1",
      port: Number(port),
      method: "POST",
      path: "/for_store/call_tool",
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) }
    })
    const ended = new Promise((resolve) => {
      request.once("error", resolve)
      request.once("close", resolve)
    })
    request.end(body)
    expect(await eventually(() => store.inFlightCalls === 1, 10_000)).toBe(true)
    request.destroy()
    await ended
    expect(await eventually(() => store.inFlightCalls === 0, 5_000)).toBe(true)
    const recorded = await eventually(async () => (await store.records.query({ tool_name: "sleep" })).executions.length === 1, 5_000)
    expect(recorded).toBe(true)
    const [record] = (await store.records.query({ tool_name: "sleep" })).executions
    expect(record).toMatchObject({ service_name: "fx", outcome: "cancelled", error: "the caller cancelled the call or went away" })
    // On the direct call route too.
    expect(await posts(499)).toBe(1)
    expect(await posts(500)).toBe(0)
    // The service goes on answering.
    const next = await server.post("/for_store/call_tool", { tool_name: "echo", service_name: "fx", args: { text: "after" } })
    expect(next.status, next.text).toBe(200)
  })
})
