#!/usr/bin/env umbra
routes = {{path="/",root="/tmp"}}
