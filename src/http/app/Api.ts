/** The application (health, workspace) and system (root information) groups' contract. */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { Unavailable } from "../contract-errors.js"

export const AppHealthResponse = Schema.Struct({
  success: Schema.Boolean,
  status: Schema.Literal("healthy", "unhealthy"),
  version: Schema.String,
  uptime_seconds: Schema.Number,
  timestamp: Schema.String
})

export class ApplicationApi extends HttpApiGroup.make("application")
  .add(
    HttpApiEndpoint.get("health", "/health")
      .addSuccess(AppHealthResponse)
      .addError(Unavailable)
      .annotate(OpenApi.Summary, "Is the server up (503 while starting or stopping)")
  )
  .add(
    HttpApiEndpoint.get("workspaceInfo", "/workspace/info")
      .addSuccess(
        Schema.Struct({
          success: Schema.Boolean,
          workspace_path: Schema.String,
          config_files: Schema.Array(Schema.String),
          data_space: Schema.String
        })
      )
      .annotate(OpenApi.Summary, "Where the services file and its data live")
  ) {}

export class SystemApi extends HttpApiGroup.make("system").add(
  HttpApiEndpoint.get("root", "/")
    .addSuccess(
      Schema.Struct({
        success: Schema.Boolean,
        name: Schema.String,
        version: Schema.String,
        description: Schema.String,
        endpoints: Schema.Struct({
          store: Schema.Number,
          agent: Schema.Number,
          monitoring: Schema.Number,
          application: Schema.Number,
          system: Schema.Number
        }).annotations({ description: "the contract's 56 endpoints per group (25, 14, 14, 2, 1)" }),
        extra_routes: Schema.Array(Schema.String).annotations({
          description: "every route served beyond the 56, as `METHOD /path` (resources, prompts, OAuth, MCP, events, metrics, inspection, docs, dashboard)"
        })
      })
    )
    .annotate(OpenApi.Summary, "API name, version, the contract's endpoint counts and the routes beyond it")
) {}
