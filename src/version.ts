/** The package version, read once from package.json so the API, CLI and banner agree. */
import { createRequire } from "node:module"

export const VERSION: string = (createRequire(import.meta.url)("../package.json") as { version: string }).version
