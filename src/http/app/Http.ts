/** Handlers of the application (health, workspace) and system (root information) groups. */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Effect, type Layer } from "effect"
import { readdir } from "node:fs/promises"
import { basename, dirname } from "node:path"
import { recordsFileFor } from "../../records/tool-records.js"
import { VERSION } from "../../version.js"
import { Api, endpointCounts, routeTable } from "../Api.js"
import { App } from "../context.js"
import { EXTRA_ROUTES } from "../extras.js"

/** The routes served beyond the contract, as `METHOD /path` with `{param}`s: the groups' extras, then the others. */
const extraRoutes = (): ReadonlyArray<string> =>
  [...routeTable().filter((r) => !r.contract), ...EXTRA_ROUTES].map((r) => `${r.method} ${r.path.replace(/:([A-Za-z_]+)/g, "{$1}")}`)

/** Files beside the services file that belong to the store's data space. */
const isStoreFile = (configFile: string) => {
  const configName = basename(configFile)
  const recordsName = basename(recordsFileFor(configFile))
  return (name: string) => name === configName || name === `${configName}.bak` || name === recordsName
}

// The group's type, written out: the declaration emit (npm run build) would otherwise infer it from
// every handler, and the type-check holds the handlers to it.
export const ApplicationHttpLive: Layer.Layer<HttpApiGroup.ApiGroup<"mcp-store", "application">, never, App> = HttpApiBuilder.group(Api, "application", (handlers) =>
  Effect.gen(function* () {
    const app = yield* App
    return handlers
      .handle("health", () =>
        Effect.sync(() => {
          const uptime_seconds = Math.round((Date.now() - app.store.startedAt) / 10) / 100
          const timestamp = new Date().toISOString()
          if (app.closing.signal.aborted || app.store.stopped) {
            const message = "The server is shutting down"
            return HttpServerResponse.unsafeJson(
              {
                success: false,
                status: "unhealthy",
                message,
                version: VERSION,
                uptime_seconds,
                timestamp,
                error: { code: "SERVICE_UNAVAILABLE", message, details: {} }
              },
              { status: 503 }
            )
          }
          return { success: true, status: "healthy" as const, version: VERSION, uptime_seconds, timestamp }
        })
      )
      .handle("workspaceInfo", () =>
        Effect.promise(async () => {
          const path = app.store.file.path
          const folder = dirname(path)
          const names = await readdir(folder).catch(() => [] as string[])
          return {
            success: true,
            workspace_path: folder,
            config_files: names.filter(isStoreFile(path)).sort(),
            data_space: path
          }
        })
      )
  })
)

export const SystemHttpLive = HttpApiBuilder.group(Api, "system", (handlers) =>
  handlers.handle("root", () =>
    Effect.succeed({
      success: true,
      name: "mcp-store",
      version: VERSION,
      description: "A store of MCP tool services for AI agents: register, list, call and watch tools, per store and per agent",
      endpoints: endpointCounts(),
      extra_routes: extraRoutes()
    })
  )
)
