// The body is parsed once (src/http/contract-middleware.ts): the body checks parse it, and the
// contract decodes that very value, which the middleware hands to the framework as the request's
// `json`. Pinned twice: on a small HttpApi with the real middleware, the handler's payload is the
// object the checks parsed (not a copy parsed again); through the real server, a body's text goes
// through JSON.parse once. Either fails if a framework update stops reading the body through
// `request.json`.
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpBody, HttpClient } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, Schema } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it, vi, type MockInstance } from "vitest"
import { RequestBody, requestBodyLayer } from "../../src/http/contract-middleware.js"
import { startTestServer, type TestServer } from "../support/index.js"

/** Every value JSON.parse returned for `text`, while spied. */
const parsesOf = (spy: MockInstance<JSON["parse"]>, text: string): unknown[] =>
  spy.mock.calls.flatMap(([arg], i) => (arg === text ? [spy.mock.results[i]?.value] : []))

afterEach(() => {
  vi.restoreAllMocks()
})

describe("the body, parsed once", () => {
  it("is the very value the contract decodes (a small HttpApi with the real middleware)", async () => {
    const Probe = HttpApi.make("probe")
      .add(HttpApiGroup.make("probe").add(HttpApiEndpoint.post("echo", "/echo").setPayload(Schema.Unknown).addSuccess(Schema.Boolean)))
      .middleware(RequestBody)
    const body = JSON.stringify({ probe: "parsed-once", nested: { n: 1 } })
    const parse = vi.spyOn(JSON, "parse")
    const Handlers = HttpApiBuilder.group(Probe, "probe", (handlers) =>
      handlers.handle("echo", ({ payload }) => Effect.sync(() => parsesOf(parse, body).some((parsed) => parsed === payload)))
    )
    const ServerLive = HttpApiBuilder.serve().pipe(
      Layer.provide(HttpApiBuilder.api(Probe).pipe(Layer.provide(Handlers), Layer.provide(requestBodyLayer(1024)))),
      Layer.provideMerge(NodeHttpServer.layerTest)
    )
    const [status, samePayload] = await Effect.gen(function* () {
      const client = yield* HttpClient.HttpClient
      const response = yield* client.post("/echo", { body: HttpBody.text(body, "application/json") })
      return [response.status, yield* response.json] as const
    }).pipe(Effect.provide(ServerLive), Effect.scoped, Effect.runPromise)
    expect(status).toBe(200)
    expect(samePayload).toBe(true)
    expect(parsesOf(parse, body)).toHaveLength(1)
  })

  describe("through the real server", () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer()
    })
    afterAll(async () => {
      await server?.cleanup()
    })

    it("a body's text goes through JSON.parse once", async () => {
      const body = JSON.stringify({ client_id_or_service_name: "parsed-once-probe", status: ["healthy", "warning"], timeout: 0 })
      const parse = vi.spyOn(JSON, "parse")
      const reply = await server.request("POST", "/for_store/wait_service", { body, headers: { "content-type": "application/json" } })
      expect(reply.status).toBe(404)
      expect(reply.body.error.code).toBe("SERVICE_NOT_FOUND")
      expect(parsesOf(parse, body)).toHaveLength(1)
    })
  })
})
