routes = {{path='/',root='/',host={a={b={c={d={}}}}}}}
