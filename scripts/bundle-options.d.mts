// Types of scripts/bundle-options.mjs for the TypeScript that imports it (bench/ab.ts, test/support, src/ui/page.ts).
import type { BuildOptions } from "esbuild"
export declare const DASHBOARD_SLOT: string
export declare const dashboardPage: () => string
export declare const bundleOptions: BuildOptions
