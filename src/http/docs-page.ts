/**
 * The page of GET /docs: Swagger UI over the API's OpenAPI document, as `@effect/platform` makes it.
 * It carries about 2 MB of Swagger UI's script and styles, so this module is loaded (and the page
 * made) on the first request for it, by `docsRoute` in src/http/extras.ts: a store that never serves
 * it neither loads nor keeps it, and starts faster.
 */
// From the modules themselves, not the package's index: the index is in the program's main chunk, and
// what it re-exports for this module would go there too.
import * as HttpApiSwagger from "@effect/platform/HttpApiSwagger"
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import { Api } from "./Api.js"

/** The page's app: answers GET /docs (built in the caller's scope). */
export const docsApp = HttpLayerRouter.toHttpEffect(HttpApiSwagger.layerHttpLayerRouter({ api: Api, path: "/docs" }))
