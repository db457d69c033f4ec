/**
 * The platform server the HttpApi app runs on: platform-node's own, with one difference in how a
 * request reaches the app. Its request listener first offers the request to a direct route (the
 * call path, src/http/call-route.ts), which answers what it takes and leaves everything else to
 * the HttpApi app's handler (`NodeHttpServer.makeHandler`, exactly as `NodeHttpServer.layer` would
 * attach it). The store has no WebSocket route, so no upgrade handler is attached.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerError from "@effect/platform/HttpServerError"
import type * as Etag from "@effect/platform/Etag"
import type * as HttpPlatform from "@effect/platform/HttpPlatform"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as NodeContext from "@effect/platform-node/NodeContext"
import { type Context, Effect, Layer, type Runtime, Scope } from "effect"
import type { Server } from "node:http"
import type { ListenOptions } from "node:net"
import type { DirectRoute } from "./call-route.js"

/** Listens on `server` and serves the app; `direct` is built once the app's runtime is known. */
const make = (server: Server, options: ListenOptions, direct: (runtime: Runtime.Runtime<never>) => DirectRoute) =>
  Effect.gen(function* () {
    yield* Effect.acquireRelease(
      Effect.async<void, HttpServerError.ServeError>((resume) => {
        const onError = (cause: unknown) => resume(Effect.fail(new HttpServerError.ServeError({ cause })))
        server.once("error", onError)
        server.listen(options, () => {
          server.off("error", onError)
          resume(Effect.void)
        })
      }),
      () =>
        Effect.async<void>((resume) => {
          if (!server.listening) return resume(Effect.void)
          server.close((error) => resume(error ? Effect.die(error) : Effect.void))
        })
    )
    const address = server.address()
    return HttpServer.make({
      address:
        typeof address === "string"
          ? { _tag: "UnixAddress", path: address }
          : { _tag: "TcpAddress", hostname: address?.address === "::" ? "0.0.0.0" : (address?.address ?? ""), port: address?.port ?? 0 },
      serve: (httpApp, middleware) =>
        Effect.gen(function* () {
          const handler = yield* (middleware === undefined ? NodeHttpServer.makeHandler(httpApp) : NodeHttpServer.makeHandler(httpApp, middleware as never))
          const route = direct(yield* Effect.runtime<never>())
          const listener: DirectRoute = (request, response) => {
            if (!route(request, response)) handler(request, response)
            return true
          }
          yield* Effect.addFinalizer(() => Effect.sync(() => void server.off("request", listener)))
          server.on("request", listener)
        })
    })
  })

/** What `NodeHttpServer.layerContext` provides: the platform's file system, path, ETags and the like. */
type PlatformServices = HttpPlatform.HttpPlatform | Etag.Generator | NodeContext.NodeContext

/**
 * `NodeHttpServer.layerContext`, built once per process: its services hold no state of a server's
 * (the terminal's and the workers' are made only when used, and nothing here uses them), and
 * building its dozen layers for each server cost more than the rest of this layer.
 */
let platform: Context.Context<PlatformServices> | undefined
const PlatformLive: Layer.Layer<PlatformServices> = Layer.effectContext(
  Effect.suspend(() =>
    platform !== undefined
      ? Effect.succeed(platform)
      : Effect.tap(Layer.buildWithScope(NodeHttpServer.layerContext, Effect.runSync(Scope.make())), (context) => Effect.sync(() => void (platform = context)))
  )
)

/** `NodeHttpServer.layer` with a direct route before the app. */
export const layer = (
  server: () => Server,
  options: ListenOptions,
  direct: (runtime: Runtime.Runtime<never>) => DirectRoute
): Layer.Layer<PlatformServices | HttpServer.HttpServer, HttpServerError.ServeError> =>
  Layer.mergeAll(Layer.scoped(HttpServer.HttpServer, Effect.suspend(() => make(server(), options, direct))), PlatformLive)
