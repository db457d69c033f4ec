// No MaxListenersExceededWarning with many services and many /events clients: every
// open event stream waits for shutdown, and the server's closing signal used to get one abort
// listener per stream, so the 11th client printed Node's "possible memory leak" warning. The
// streams now share one listener; this runs the reported case (12 services, 12 subscribers,
// check_services) and listens for any warning of the process. Shutdown still ends every stream.
import { afterAll, beforeAll, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { flush, openSse, startTestServer, within, type SseStream, type TestServer } from "../support/index.js"

const SERVICES = 12
const SUBSCRIBERS = 12

let fixture: HttpFixture
let server: TestServer
const streams: SseStream[] = []

beforeAll(async () => {
  fixture = await startHttpFixture()
  server = await startTestServer()
})
afterAll(async () => {
  for (const s of streams) s.close()
  await server.cleanup()
  await fixture.stop()
})

it("12 services, 12 /events subscribers and check_services: no listener warning; shutdown ends every stream", async () => {
  const warnings: Array<Error> = []
  const onWarning = (warning: Error) => warnings.push(warning)
  process.on("warning", onWarning)
  try {
    for (let i = 0; i < SUBSCRIBERS; i++) streams.push(await openSse(`${server.url}/events`))
    const added = await server.post(
      "/for_store/add_service?wait=10",
      Array.from({ length: SERVICES }, (_, i) => ({ name: `svc${i}`, url: fixture.url }))
    )
    expect(added.status).toBe(200)
    // Every subscriber is live: it has seen every service become healthy.
    await Promise.all(
      streams.map((s) =>
        s.until((events) => new Set(events.filter((e) => e.event === "status" && e.json?.to === "healthy").map((e) => e.json.service_name)).size === SERVICES, 10_000, "every service healthy")
      )
    )
    const checked = await server.get("/for_store/check_services")
    expect(checked.status).toBe(200)
    expect(checked.body.total).toBe(SERVICES)
    // Warnings are emitted on the next tick.
    await flush()
    expect(warnings.map((w) => `${w.name}: ${w.message}`)).toEqual([])

    await server.close()
    const ends = await within(Promise.all(streams.map((s) => s.ended)), 5_000, "every stream ended by shutdown")
    expect(ends.every((e) => e === "end" || e === "error")).toBe(true)
  } finally {
    process.off("warning", onWarning)
  }
})
