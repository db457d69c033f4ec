/**
 * Every wait ends when its client goes away: the handler's fiber is interrupted, and with it the
 * Effect that waits on the actor (src/runtime/bridge.ts), so its subscription and its place among
 * the waiters are given back at once, not when its time-out passes. Before the runtime was
 * Effect-native, add_service `?wait` ran without the request's signal and kept waiting.
 */
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { gatedStdioFixture } from "../fixtures/paths.js"
import { eventually, startTestServer, type TestServer } from "../support/index.js"

let server: TestServer | undefined
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
    const started = performance.now()
    controller.abort()
    expect(await request).toBeInstanceOf(Error)
    expect(await eventually(() => store.waiters.active === 0, 5_000)).toBe(true)
    expect(performance.now() - started).toBeLessThan(5_000)
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
  })
})
